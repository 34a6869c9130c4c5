"""Troupe: the contract shared by the webhook and the reconciler (annotation, label and gate
keys, configuration, parsing a pod into its requests)."""
