"""The offline and read-only tools: the simulator, ``kubectl troupe`` and the views they
share, and the manifests they expand for ``kubectl troupe plan``."""
