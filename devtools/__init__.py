"""Developer tooling: the local control plane (:mod:`devtools.devcluster`) and the demo
(:mod:`devtools.demo`).

Nothing here ships: the wheel and the image hold ``troupe``, ``webhook``, ``reconciler``
and ``certs`` only, and none of them imports this package (import-linter enforces it).
Tooling may import anything.
"""
