"""The keys the engine and the reconciler name objects by, one type each.

- :class:`PodKey`: a pod, ``namespace/name``. It *is* that string (a ``str`` subclass), so
  it orders, hashes and prints as the key users read in reasons and ``kubectl troupe``,
  and a plain ``"namespace/name"`` finds the same entry in a dict keyed by it; its parts
  are :attr:`PodKey.namespace` and :attr:`PodKey.name`. The snapshot's pods, placements,
  victims, the reconciler's cache and its writes all use it.
- :data:`WorkloadKey`: a workload object (Job, JobSet, LeaderWorkerSet, PyTorchJob),
  ``(kind, namespace, name)``.

A gang's key is its ``namespace/id`` string (:mod:`reconciler.engine.gangs.gang`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PodKey(str):
    """A pod's ``namespace/name`` (module docstring). ``PodKey("ml", "train-0")`` is the
    string ``"ml/train-0"``; a name holds no ``/``, so the first ``/`` splits it."""

    __slots__ = ()

    def __new__(cls, namespace: str, name: str) -> PodKey:
        return super().__new__(cls, f"{namespace}/{name}")

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        """What ``copy`` and ``pickle`` rebuild it from (not the joined string)."""
        return self.namespace, self.name

    @classmethod
    def parse(cls, key: str) -> PodKey:
        """The key of a ``namespace/name`` string (everything after the first ``/`` is the
        name)."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodKey:
        """The key of a Pod object (a dict): namespace ``default`` when absent; a value
        that is not a string reads as absent."""
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, name = meta.get("namespace"), meta.get("name")
        return cls(namespace if isinstance(namespace, str) and namespace else "default",
                   name if isinstance(name, str) else "")

    @property
    def namespace(self) -> str:
        """The part before the first ``/``."""
        return self.partition("/")[0]

    @property
    def name(self) -> str:
        """The part after the first ``/``."""
        return self.partition("/")[2]


WorkloadKey = tuple[str, str, str]
"""A workload object (Job, JobSet, LeaderWorkerSet, PyTorchJob): ``(kind, namespace, name)``."""
