"""The one snapshot builder: :func:`build_snapshot` makes the engine's
:class:`~reconciler.engine.ledger.snapshot.Snapshot` of :class:`~reconciler.engine.ledger.parts.SnapshotParts`.

The reconciler's cache, the simulator, ``kubectl troupe``, the tests and the benchmarks all
call it, so what the simulator decides is what the reconciler decides on the same objects
(docs/decisions/047-one-snapshot-builder.md). Everything a snapshot is made of besides the
parsed objects themselves is done here, once:

- DRA counted as units (:func:`reconciler.engine.ledger.draunits.apply`, decision 044): nodes offer
  their devices, pods ask for their claims, device attributes become topology labels, when
  the catalog holds any DRA object (a cluster that serves none counts no claim);
- the configuration's default spread constraints (:func:`spread_defaults`);
- the reservations of gangs released as created, from their workloads (decision 034): only
  those of workloads Troupe plans (:func:`~reconciler.engine.model.membership.planned_gangs`;
  a record on any other workload holds nothing, decision 049);
- SharedDeviceGroups and PodDisruptionBudgets in name order, the volume catalog and the
  namespaces' labels;
- the gangs evicted only whole, named by the pod groups their members join
  (:func:`whole_victims`, docs/decisions/056-pod-groups.md), and the priorities those
  groups state (:func:`group_priorities`).

:func:`snapshot_of_objects` is the same for lists of plain objects (parsed by
:func:`~reconciler.engine.ledger.parts.read_parts`), what tests and benchmarks build on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.engine.ledger import draunits
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.parts import SnapshotParts, located, read_parts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model import dra
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.keys import PodKey, WorkloadKey
from reconciler.engine.model.limits import Limit, pod_limit
from reconciler.engine.model.membership import auto_namespaces, planned_gangs
from reconciler.engine.model.podterms import DO_NOT_SCHEDULE, SpreadConstraint
from troupe.config import Config


def spread_defaults(config: Config) -> tuple[SpreadConstraint, ...]:
    """The configured ``topologySpreadDefaultConstraints`` that filter (``DoNotSchedule``),
    as the engine's constraints without a selector (the engine gives each pod its own,
    :func:`reconciler.engine.filters.podtopologyspread.default_constraints`). Source: kube-scheduler's
    PodTopologySpread plugin, ``defaultConstraints``."""
    return tuple(SpreadConstraint(c.topology_key, c.max_skew, None, c.min_domains, c.node_affinity_policy == "Honor",
                                  c.node_taints_policy == "Honor")
                 for c in config.topology_spread_default_constraints if c.when_unsatisfiable == DO_NOT_SCHEDULE)


def counts_devices(parts: SnapshotParts) -> bool:
    """Whether DRA changes the nodes or pods of ``parts``: the catalog holds some DRA object
    and some pod has a claim or some configured level is a device attribute. When it does
    not, a snapshot's node table depends on the nodes alone (a cache may keep it)."""
    devices = parts.devices
    return bool(devices) and (any(p.claims for p in parts.pods)
                              or bool(dra.level_attributes(devices, parts.config.all_levels)))


def build_snapshot(parts: SnapshotParts, devices: draunits.NodesMemo | None = None) -> Snapshot:
    """The snapshot of ``parts`` (module docstring). A prebuilt :class:`NodeTable` in
    ``parts.nodes`` is used as it is unless DRA changes the nodes (:func:`counts_devices`),
    which then get a table of their own: kept in ``devices`` (a cache's, across its
    snapshots) with the counted nodes it is made of, and used again while the nodes, the
    DRA objects and the demand for devices stay the same (:class:`~reconciler.engine.ledger.draunits.NodesMemo`).
    Raises ``ValueError`` on two nodes or two pods of one name."""
    nodes, pods, config = parts.nodes, parts.pods, parts.config
    if counts_devices(parts):  # nodes offer, and pods ask, DRA devices (docs/decisions/044-dra.md)
        plain = nodes.nodes if isinstance(nodes, NodeTable) else nodes
        counted, pods = draunits.apply(plain, pods, parts.devices, config.all_levels, devices)
        nodes = counted if devices is None else devices.derived(counted, lambda: NodeTable(counted, parts.topology))
    return Snapshot(nodes, pods, parts.topology, sorted(parts.groups, key=lambda g: g.name), parts.group_errors,
                    sorted(parts.budgets, key=lambda b: (b.namespace, b.name)), namespaces=parts.namespaces,
                    volumes=parts.volumes, spread_defaults=spread_defaults(config),
                    reservations=parts.workloads.reservations(planned_workloads(parts)),
                    whole_victims=whole_victims(parts), group_priorities=group_priorities(parts), usage=parts.usage,
                    limits=pod_limits(parts) if config.queueing_strategy == "Backfill" else None)


def pod_limits(parts: SnapshotParts) -> dict[PodKey, Limit]:
    """Pod key -> its time limits (:func:`~reconciler.engine.model.limits.pod_limit`), for the
    active pods of ``parts`` that have one: their own ``spec.activeDeadlineSeconds`` and
    Kueue label, and their controlling workload's deadline and Kueue label
    (docs/decisions/079-reservation-at-earliest-start-and-backfill.md). Read only under
    ``queueingStrategy: Backfill``, the one reader (about 2 µs a pod)."""
    objects = parts.workloads.objects
    out = {}
    for pod in parts.pods:
        if not pod.active:
            continue
        owner = pod.owner
        w = objects.get((owner.kind, pod.namespace, owner.name)) if owner is not None else None
        deadline = pod.spec_values.deadline_seconds if pod.spec_values is not None else None
        limit = pod_limit(deadline, pod.labels, pod.started_at, w.ends_at if w else None,
                          w.max_exec_seconds if w else None, w.started if w else None)
        if limit is not None:
            out[pod.key] = limit
    return out


def whole_victims(parts: SnapshotParts) -> frozenset[str]:
    """The keys of the gangs of ``parts`` that are evicted only whole: a member names a
    pod group whose ``disruptionMode`` is ``all`` (docs/decisions/056-pod-groups.md)."""
    groups = parts.workloads.groups
    if not any(spec.whole_victim for spec in groups.values()):
        return frozenset()
    out = set()
    for pod in parts.pods:
        ref = pod.pod_group
        spec = parts.workloads.group(pod.namespace, ref) if ref is not None else None
        if spec is not None and spec.whole_victim:
            out.add(gang_key(pod, parts.config) or f"{pod.namespace}/pod:{pod.name}")
    return frozenset(out)


def group_priorities(parts: SnapshotParts) -> dict[PodKey, int]:
    """Pod key -> the priority its pod group states, for the pods of ``parts`` whose group
    states one: the priority each counts with, as a preemptor's member and as a victim
    (:meth:`~reconciler.engine.ledger.snapshot.Snapshot.priority_of`)."""
    groups = parts.workloads.groups
    if not any(spec.priority is not None for spec in groups.values()):
        return {}
    out = {}
    for pod in parts.pods:
        ref = pod.pod_group
        spec = parts.workloads.group(pod.namespace, ref) if ref is not None else None
        if spec is not None and spec.priority is not None and not spec.error:
            out[pod.key] = spec.priority
    return out


def planned_workloads(parts: SnapshotParts) -> frozenset[WorkloadKey]:
    """The workloads of ``parts`` whose gangs are released as created (their reservations
    are the ones a snapshot holds): ``parts.planned`` when the caller gave them."""
    if parts.planned is not None:
        return parts.planned
    planned = planned_gangs(parts.workloads, parts.config, auto_namespaces(parts.namespaces))
    return frozenset(w.key for w in planned.values())


def snapshot_of_objects(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = (),
                        levels: TopologyLevels | None = None, *, groups: Iterable[Mapping[str, Any]] = (),
                        budgets: Iterable[Mapping[str, Any]] = (), objects: Iterable[Mapping[str, Any]] = (),
                        config: Config | None = None, skipped: list[str] | None = None) -> Snapshot:
    """The snapshot of plain objects (:func:`read_parts` then :func:`build_snapshot`):
    Node, Pod, SharedDeviceGroup and PodDisruptionBudget objects in lists of their own
    (named ``nodes[2]`` ... in messages), and ``objects`` of any kind
    :func:`~reconciler.engine.ledger.parts.read_parts` reads, each read as its ``kind`` field
    says (PersistentVolumeClaims, Namespaces, Jobs, the DRA kinds...). ``config`` and
    ``levels`` default to the built-in configuration and its (GKE's) levels.

    Raises :class:`~reconciler.engine.ledger.parts.BadObject` naming the object and the field
    (``nodes[2] (Node n3): status.allocatable: missing field``); given a ``skipped`` list, a
    malformed object is left out instead and its message appended there."""
    listed = [*located("nodes", "Node", nodes), *located("pods", "Pod", pods),
              *located("groups", "SharedDeviceGroup", groups), *located("budgets", "PodDisruptionBudget", budgets),
              *[(f"objects[{i}]", str(obj.get("kind", "")), obj) for i, obj in enumerate(objects)]]
    return build_snapshot(read_parts(listed, config, levels, skipped=skipped).parts)
