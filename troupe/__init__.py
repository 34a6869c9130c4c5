"""Troupe: the contract shared by the webhook and the reconciler, and developer tooling."""
