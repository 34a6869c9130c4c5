"""Troupe: the contract shared by the webhook and the reconciler (annotation, label and gate
keys, configuration, parsing a pod into its requests)."""

#: Troupe's version: the distribution's (pyproject.toml), the chart's and the image's
#: (charts/troupe/Chart.yaml), and what ``kubectl troupe --version`` prints.
__version__ = "0.1.0"
