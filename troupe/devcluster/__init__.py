"""A local Kubernetes control plane for Troupe's tests, demo and development.

Real etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their Go
modules (see :mod:`troupe.devcluster.build`), kwok simulating nodes and running pods, all on
127.0.0.1. One entry point for everyone: :class:`Cluster` in Python (tests, demo) and
``python -m troupe.devcluster build|up|down|status`` on the command line.
"""

from troupe.devcluster.build import Binaries, BuildError, ensure_built
from troupe.devcluster.cluster import Cluster, ClusterError
from troupe.devcluster.nodes import NodesFileError
from troupe.devcluster.pki import ADMIN, ALICE, DEFAULT_IDENTITIES, RECONCILER, Identity
from troupe.devcluster.processes import ComponentDied

__all__ = [
    "ADMIN",
    "ALICE",
    "DEFAULT_IDENTITIES",
    "RECONCILER",
    "Binaries",
    "BuildError",
    "Cluster",
    "ClusterError",
    "ComponentDied",
    "Identity",
    "NodesFileError",
    "ensure_built",
]
