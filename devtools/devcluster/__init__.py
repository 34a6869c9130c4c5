"""A local Kubernetes control plane for Troupe's tests, demo and development.

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their Go
modules (see :mod:`devtools.devcluster.build`), kwok simulating nodes and running pods, all on
127.0.0.1. One entry point for everyone: :class:`Cluster` in Python (tests, demo) and
``python -m devtools.devcluster build|up|down|status`` on the command line.
"""

from devtools.devcluster.build import Binaries, BuildError, ensure_built
from devtools.devcluster.cluster import ClientRate, Cluster, ClusterError
from devtools.devcluster.nodes import NodesFileError
from devtools.devcluster.pki import ADMIN, ALICE, DEFAULT_IDENTITIES, RECONCILER, Identity
from devtools.devcluster.processes import ComponentDied

__all__ = [
    "ADMIN",
    "ALICE",
    "DEFAULT_IDENTITIES",
    "RECONCILER",
    "Binaries",
    "BuildError",
    "ClientRate",
    "Cluster",
    "ClusterError",
    "ComponentDied",
    "Identity",
    "NodesFileError",
    "ensure_built",
]
