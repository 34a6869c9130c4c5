"""A LeaderWorkerSet as a workload (docs/decisions/014-workload-gangs.md): one gang per group
(its pods' labels ``leaderworkerset.sigs.k8s.io/name`` and ``group-index``), of
``leaderWorkerTemplate.size`` members; no slots (its groups are released when complete); a
group that is recreated keeps its labels, so its members created before the group's current
leader are of the old group (:meth:`LeaderWorkerSetKind.superseded`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds.base import WorkloadKind, as_map, count
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from troupe.workloadkinds import LEADER_WORKER_SET


class LeaderWorkerSetKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a LeaderWorkerSet."""

    facts = LEADER_WORKER_SET

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """``spec.leaderWorkerTemplate.size``: one group."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        size = count(as_map(as_map(obj.get("spec")).get("leaderWorkerTemplate")).get("size"), 1)
        return size, f"LeaderWorkerSet {name} group size"

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """``replicas x size``: all its groups."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        spec = as_map(obj.get("spec"))
        replicas, size = count(spec.get("replicas"), 1), count(as_map(spec.get("leaderWorkerTemplate")).get("size"), 1)
        return replicas * size, f"LeaderWorkerSet {name}: spec.replicas {replicas} x spec.leaderWorkerTemplate.size {size}"

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``lws:<name>:<group index>`` of its labels."""
        lws, index = pod.labels.get(contract.LWS_NAME_LABEL), pod.labels.get(contract.LWS_GROUP_INDEX_LABEL)
        if not lws or index is None:
            return None
        return f"lws:{lws}:{index}", (LEADER_WORKER_SET.kind, pod.namespace, lws)

    def superseded(self, members: Iterable[PodInfo]) -> set[str]:
        """Members created before the group's current leader (worker index 0, the newest
        one). Creation timestamps have one-second resolution, so a pod created in the same
        second as the leader is kept."""
        members = list(members)
        leaders = [t for p in members if p.labels.get(contract.LWS_WORKER_INDEX_LABEL) == "0"
                   and (t := epoch(p.creation_timestamp)) is not None]
        if not leaders:
            return set()
        newest = max(leaders)
        return {p.key for p in members if (t := epoch(p.creation_timestamp)) is not None and t < newest}
