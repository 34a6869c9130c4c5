"""``DynamicResources``: the devices of a pod's ResourceClaims can be allocated on the node,
and a claim already allocated is on it (``pkg/scheduler/framework/plugins/dynamicresources``;
Kubernetes docs "Dynamic Resource Allocation"; KEP-4381). kube-scheduler runs it after
``InterPodAffinity`` (its default profile inserts it before ``DefaultPreemption``).

Troupe counts claims as units before any filter runs (:mod:`reconciler.engine.ledger.draunits`,
docs/decisions/044-dra.md): a node offers ``devices/<class>`` units for its free matching
devices and a ``resourceclaim/<namespace>/<name>`` unit where a claim is allocated, and a
pod requests them as it requests ``nvidia.com/gpu``. So this plugin's check is made by
:mod:`.noderesources` in the same pass, worded as resources are (``insufficient
devices/gpu.example.com``), which keeps one listing per node whatever it is short of; this
module says which of those units no freed room can give.
"""

from __future__ import annotations

from reconciler.engine.filters.status import Plugin, Registered
from reconciler.engine.ledger.draunits import CLAIM

PLUGIN = Plugin("DynamicResources")


def pinned(resource: str) -> bool:
    """Whether ``resource`` holds a pod to the node its claim is allocated on: a node
    without it never takes the pod, whatever is freed (kube-scheduler's "resourceclaim not
    available on the node", ``UnschedulableAndUnresolvable``)."""
    return resource.startswith(CLAIM)


REGISTERED = Registered(PLUGIN, (), "pkg/scheduler/framework/plugins/dynamicresources")
