"""What a snapshot is built of (:class:`SnapshotParts`: the cluster's objects parsed, and
the configuration), and the one parser of object lists into it (:func:`read_parts`).

Two kinds of callers make parts, and both hand them to the one builder,
:func:`reconciler.engine.ledger.builder.build_snapshot`
(docs/decisions/047-one-snapshot-builder.md):

- the reconciler's cache, which parses each object as its watch event arrives and keeps
  the parsed values in its indexes (and its :class:`~reconciler.engine.ledger.nodetable.NodeTable`
  while only pods change);
- everything that reads a list of objects at once: the simulator and ``kubectl troupe``
  (a snapshot file, or the live cluster read once), the tests and the benchmarks, through
  :func:`read_parts`.

Pure: plain dicts in, the engine's values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.ledger import draunits
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.ledger.usage import UsageCopy
from reconciler.engine.model import dra
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.budgets import Budget
from reconciler.engine.model.devicegroups import DeviceGroup
from reconciler.engine.model.fields import ObjectError, mapping, string
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.volumes import PARSERS, VOLUME_KINDS, VolumeCatalog
from troupe.adoption import APPS_OWNER_KINDS
from troupe.config import Config
from troupe.podgroups import API_BY_SOURCE, GROUP_APIS, PodGroupSpec, parse_pod_group, source_of

Located = tuple[str, str, Mapping[str, Any]]
"""One object of a list: ``(where, kind, object)``; ``where`` names it in messages
(``snapshot.json items[3]``, ``nodes[2]``), ``kind`` is what its ``kind`` field says."""

#: The kind of every source's pod group objects (``PodGroup``; the ``apiVersion`` says
#: whose, docs/decisions/056-pod-groups.md).
POD_GROUP = GROUP_APIS[0].kind
#: Every kind :func:`read_parts` reads.
KINDS = ("Node", "Pod", "Job", *(k.kind for k in wl.CUSTOM_KINDS), "SharedDeviceGroup", "PodDisruptionBudget",
         *PARSERS, *dra.KINDS, POD_GROUP, *APPS_OWNER_KINDS)
_KINDS = frozenset(KINDS)


@dataclass(frozen=True)
class SnapshotParts:
    """The input of :func:`~reconciler.engine.ledger.builder.build_snapshot`.

    ``nodes``: parsed nodes, or a :class:`NodeTable` made of them with the same levels (a
    cache's, shared by snapshots while only pods change); ``pods``: parsed pods (no two
    with one key); ``groups``: SharedDeviceGroups, and ``group_errors`` (name -> why a group
    cannot be read or is missing); ``budgets``: PodDisruptionBudgets; ``volumes``: the
    claims, volumes and CSINodes (None when they were not read: the volume filters are then
    skipped); ``namespaces``: name -> labels; ``devices``: the DRA objects; ``workloads``:
    the workload objects as decisions read them, their slots' claims counted with
    ``devices`` (:func:`count_slots`), which carry the reservations of gangs released as
    created; ``config``: the configuration (topology levels, the levels that may be device
    attributes, the default spread constraints); ``levels``: its
    :class:`TopologyLevels`, when the caller has them made already (None: made from ``config``);
    ``usage``: what the bound pods among ``pods`` use, counted already on the table in
    ``nodes`` (a cache's :class:`~reconciler.engine.ledger.usage.BoundUsage`, copied; None:
    every pod is counted by the snapshot); ``planned``: the keys of the workloads released
    as created (:func:`~reconciler.engine.model.membership.planned_gangs` of ``workloads``),
    when the caller keeps them already (None: found by the snapshot).
    """

    nodes: Sequence[NodeInfo] | NodeTable
    pods: Sequence[PodInfo]
    groups: Sequence[DeviceGroup] = ()
    group_errors: Mapping[str, str] = field(default_factory=dict)
    budgets: Sequence[Budget] = ()
    volumes: VolumeCatalog | None = None
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    devices: dra.Catalog = field(default_factory=dra.Catalog)
    workloads: wl.Workloads = field(default_factory=wl.Workloads)
    config: Config = field(default_factory=Config)
    levels: TopologyLevels | None = None
    usage: UsageCopy | None = None
    planned: frozenset[WorkloadKey] | None = None

    @property
    def topology(self) -> TopologyLevels:
        """``levels``, else those of ``config``."""
        return self.levels if self.levels is not None else TopologyLevels.from_config(self.config)


@dataclass(frozen=True)
class ReadParts:
    """What :func:`read_parts` makes of a list of objects: the snapshot's ``parts``, and
    Jobs' ``parallelism`` by ``(namespace, name)`` (what sizes a Job's auto-gang; gangs
    read it, the snapshot does not hold it)."""

    parts: SnapshotParts
    parallelism: Mapping[tuple[str, str], int]


class BadObject(ObjectError):
    """An object of a list that cannot be read: ``where`` it is, ``what`` it is (its kind
    and name, ``Pod ml/train-0``) and the ``error`` it raised; ``str()`` is
    ``"<where> (<what>): <field>: <why>"``."""

    def __init__(self, where: str, what: str, error: ObjectError) -> None:
        self.where, self.what, self.error = where, what, error
        super().__init__(f"{where} ({what})" + (f": {error.field}" if error.field else ""), error.why)


def describe(obj: Mapping[str, Any], kind: str) -> str:
    """An object's kind and name as messages name it (``Node n1``, ``Pod ml/train-0``;
    the kind alone when it has no name)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str):
        return kind
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if kind == "Pod" and isinstance(ns, str) else f"{kind} {name}"


def count_slots(workloads: Mapping[WorkloadKey, wl.Workload], devices: dra.Catalog) -> dict[WorkloadKey, wl.Workload]:
    """``workloads`` with their slots' DRA claims counted as their pods' will be
    (:func:`reconciler.engine.ledger.draunits.convert_slots`), when ``devices`` holds any DRA
    object; as they are otherwise (a cluster that serves no DRA objects counts no claim)."""
    if not devices:
        return dict(workloads)
    return {k: dataclasses.replace(w, slots=draunits.convert_slots(w.slots, devices)) for k, w in workloads.items()}


def duplicate(first: str) -> ObjectError:
    """The error of a second object of a kind and name that was read at ``first`` (a list
    holds each Node, Pod and SharedDeviceGroup once)."""
    return ObjectError("", f"duplicate of {first}")


class _Reader:
    """The state of one :func:`read_parts`: what has been read so far, by kind."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pod_groups: dict[wl.GroupKey, PodGroupSpec] = {}
        self.nodes: list[NodeInfo] = []
        self.pods: list[PodInfo] = []
        self.groups: list[DeviceGroup] = []
        self.budgets: list[Budget] = []
        self.volumes: dict[str, list[Any]] = {kind: [] for kind in VOLUME_KINDS}
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.parallelism: dict[tuple[str, str], int] = {}
        self.workloads: dict[WorkloadKey, wl.Workload] = {}
        self.owners: dict[WorkloadKey, wl.OwnerObject] = {}
        self.devices: list[dra.Device] = []
        self.classes: dict[str, tuple[str, ...]] = {}
        self.claims: dict[tuple[str, str], dra.Claim] = {}
        self.templates: dict[tuple[str, str], tuple[dra.Request, ...]] = {}
        #: Per kind, where each name was read first.
        self.seen: dict[str, dict[str, str]] = {"Pod": {}, "Node": {}, "SharedDeviceGroup": {}, POD_GROUP: {}}

    def read(self, where: str, kind: str, obj: Mapping[str, Any]) -> None:
        """Read one object of a kind but Pod and Node into its kind's list (pods and nodes,
        most of any list, are read by :func:`read_parts` itself, a call fewer each); raises
        :class:`ObjectError`."""
        if kind not in _KINDS:
            raise ObjectError("", f"unknown kind {kind!r} (expected {', '.join(KINDS)})")
        if kind == "SharedDeviceGroup":
            group = DeviceGroup.from_object(obj)
            if (first := self.seen[kind].setdefault(group.name, where)) is not where:
                raise duplicate(first)
            self.groups.append(group)
        elif kind == "PodDisruptionBudget":
            self.budgets.append(Budget.from_object(obj))
        elif kind == POD_GROUP:
            self.read_pod_group(where, obj)
        elif kind in APPS_OWNER_KINDS:  # their Volcano minimum (docs/decisions/065-adopted-pods-join-their-peers-groups.md)
            owner = wl.owner_object(kind, obj)
            if owner is not None:
                self.owners[owner.key] = owner
        elif kind in dra.KINDS:
            one = dra.catalog([(kind, obj)])
            self.devices.extend(one.devices)
            self.classes.update(one.classes)
            self.claims.update(one.claims)
            self.templates.update(one.templates)
        elif kind == "Namespace":
            self.namespaces[string(mapping(obj, "metadata", required=True), "name", "metadata")] = PARSERS[kind](obj)
        elif kind in PARSERS:
            self.volumes[kind].append(PARSERS[kind](obj))
        else:  # a workload kind
            meta = mapping(obj, "metadata", required=True)
            mapping(obj, "spec")  # a spec that is not a mapping is refused, naming the field
            key = (string(meta, "namespace", "metadata", default="default"),
                   string(meta, "name", "metadata", required=True))
            if kind == "Job":
                self.parallelism[key] = wl.job_parallelism(obj)
            found = wl.workload(kind, obj)
            if found is not None:
                self.workloads[found.key] = found


    def read_pod_group(self, where: str, obj: Mapping[str, Any]) -> None:
        """One pod group object of any source (its ``apiVersion`` says which); raises
        :class:`ObjectError` for an API Troupe does not read, or a second group of one
        source, namespace and name. A group whose fields cannot be read is kept: its gang
        is held with the reason (:func:`~troupe.podgroups.parse_pod_group`)."""
        api_version = obj.get("apiVersion")
        source = source_of(api_version) if isinstance(api_version, str) else None
        if source is None:
            served = ", ".join(f"{a.group}/{v}" for a in API_BY_SOURCE.values() for v in a.versions)
            raise ObjectError("apiVersion", f"not a pod group API Troupe reads ({served}), got {api_version!r}")
        meta = mapping(obj, "metadata", required=True)
        name = string(meta, "name", "metadata", required=True)
        spec = parse_pod_group(source, obj, self.config)
        key = (source, spec.namespace, name)
        if (first := self.seen[POD_GROUP].setdefault("/".join(key), where)) is not where:
            raise duplicate(first)
        self.pod_groups[key] = spec


def read_parts(objects: Iterable[Located], config: Config | None = None, levels: TopologyLevels | None = None, *,
               absent_group: str | None = None, skipped: list[str] | None = None) -> ReadParts:
    """Parse every object of ``objects`` (:data:`Located` triples of the :data:`KINDS`)
    into :class:`SnapshotParts` with ``config`` (default: the built-in configuration) and
    ``levels`` (default: the configuration's), as the reconciler's cache parses each kind:
    claims, volumes and CSINodes make the volume catalog (None when the objects hold none
    of them: they were not read), Namespaces the namespaces' labels, the DRA kinds the
    device catalog, workloads their reservations (:func:`count_slots`), pod groups of any
    source (``kind: PodGroup``, read by their ``apiVersion``) the workloads' ``groups``,
    ReplicaSets, StatefulSets and DaemonSets their ``owners``.
    ``absent_group``: why a SharedDeviceGroup a pod joins is not among the objects (a
    snapshot file's note; None: no reason is given and the gang's own rule says it).

    Raises :class:`BadObject` for an object that cannot be read (a malformed field, an
    unknown kind, a second Node, Pod or SharedDeviceGroup of the same name); given a
    ``skipped`` list, the object is left out instead and the message appended there
    (what a caller that must go on wants)."""
    config = config if config is not None else Config()
    reader = _Reader(config)
    pods, pod_at, read_pod = reader.pods, reader.seen["Pod"], PodInfo.from_object
    nodes, node_at, read_node = reader.nodes, reader.seen["Node"], NodeInfo.from_object
    for where, kind, obj in objects:
        try:
            if kind == "Pod":
                pod = read_pod(obj)
                if (first := pod_at.setdefault(pod.key, where)) is not where:
                    raise duplicate(first)
                pods.append(pod)
            elif kind == "Node":
                node = read_node(obj)
                if (first := node_at.setdefault(node.name, where)) is not where:
                    raise duplicate(first)
                nodes.append(node)
            else:
                reader.read(where, kind, obj)
        except ObjectError as e:
            bad = BadObject(where, describe(obj, kind), e)
            if skipped is None:
                raise bad from None
            skipped.append(str(bad))
    volumes = reader.volumes
    catalog = VolumeCatalog(*(volumes[kind] for kind in VOLUME_KINDS)) if any(volumes.values()) else None
    devices = dra.Catalog(tuple(reader.devices), reader.classes, reader.claims, reader.templates)
    named = {g.name for g in reader.groups}
    absent = {p.device_group: absent_group for p in reader.pods if p.device_group and p.device_group not in named} \
        if absent_group else {}
    parts = SnapshotParts(reader.nodes, reader.pods, reader.groups, absent, reader.budgets, catalog, reader.namespaces,
                          devices, wl.Workloads(count_slots(reader.workloads, devices), groups=reader.pod_groups,
                                                owners=reader.owners),
                          config, levels)
    return ReadParts(parts, reader.parallelism)


def located(name: str, kind: str, objects: Iterable[Mapping[str, Any]]) -> list[Located]:
    """``objects`` of one ``kind`` as :data:`Located` triples named by ``name`` and their
    index (``nodes[2]``)."""
    return [(f"{name}[{i}]", kind, obj) for i, obj in enumerate(objects)]
