"""How a preemption tells of the other side: by name within one namespace, by count across
namespaces (docs/decisions/064-preemption-names-no-other-tenant.md).

What the reconciler writes in a namespace (a pod's conditions and annotations, its Events,
its Gang object) is read by whoever may read that namespace, so it names no object of
another: a preemptor is told how many gangs of other namespaces it evicts and at which
priority, a victim that a gang of another namespace took its room. The names are in the
reconciler's log, and each side's own objects carry its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.model.text import plural


def namespace_of(key: str) -> str:
    """The namespace of a gang or pod key (``namespace/name``)."""
    return key.split("/", 1)[0]


def elsewhere(count: int) -> str:
    """``1 gang of another namespace``, ``3 gangs of other namespaces``."""
    return "1 gang of another namespace" if count == 1 else f"{count} gangs of other namespaces"


def gangs_told(keys: Iterable[str], namespace: str) -> str:
    """Gang keys as a reason in ``namespace`` tells them: those of ``namespace`` by name
    (sorted), the others counted (``team-c/a, team-c/b and 2 gangs of other namespaces``;
    ``1 gang of another namespace``); ``""`` for none."""
    keys = sorted(set(keys))
    own = [key for key in keys if namespace_of(key) == namespace]
    others = len(keys) - len(own)
    if not others:
        return ", ".join(own)
    return f"{', '.join(own)} and {elsewhere(others)}" if own else elsewhere(others)


def evicting(keys: Iterable[str], pods: int, priority: int, namespace: str) -> str:
    """The head of a preemption plan's reason in ``namespace``: ``evict 2 gangs (5 pods,
    priority <= 10: ml/a, ml/b)``, ``evict 1 gang of another namespace (4 pods, priority
    <= 0)``, ``evict 2 gangs (3 pods, priority <= 0: ml/a and 1 gang of another
    namespace)``."""
    keys = sorted(set(keys))
    if all(namespace_of(key) != namespace for key in keys):
        return f"evict {elsewhere(len(keys))} ({plural(pods, 'pod')}, priority <= {priority})"
    return f"evict {plural(len(keys), 'gang')} ({plural(pods, 'pod')}, priority <= {priority}: {gangs_told(keys, namespace)})"
