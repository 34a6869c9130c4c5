"""Which gang a pod belongs to, and which workloads are released as created: the keys of
gang membership, read from the objects and the configuration alone (DESIGN.md "Gangs";
``docs/contract.md``, "Which pods form a gang"), so that the snapshot builder
(:mod:`reconciler.engine.ledger.builder`) and the gangs room
(:mod:`reconciler.engine.gangs.gang`) read it alike. A pod's key is its declaring source's
(:func:`reconciler.engine.model.declared.gang_key`).

Pure: plain data in (:class:`~reconciler.engine.model.pods.PodInfo`,
:class:`~reconciler.engine.model.workloads.Workloads`), keys out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import troupe.contract as contract
import troupe.kueue as kueue
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.declared.memberkeys import gang_keys
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config
from troupe.errors import ContractError
from troupe.policies import AS_CREATED, WHEN_COMPLETE, parse_release_mode


def group_by_gang(pods: Iterable[PodInfo], config: Config) -> dict[str, list[PodInfo]]:
    """Every pod Troupe manages, by gang key (:func:`~reconciler.engine.model.declared.gang_key`)."""
    out: dict[str, list[PodInfo]] = {}
    for pod in pods:
        key = gang_key(pod, config)
        if key is not None:
            out.setdefault(key, []).append(pod)
    return out


#: What :func:`planned_gangs` found of one workload: None (no gang of its own), or the key
#: of the gang its slots name and the workload released as created from it (None when the
#: gang is released when complete).
Candidate = tuple[str, wl.Workload | None] | None

#: :func:`planned_gangs`'s memo, kept by its caller: workload key -> (the workload read, whether
#: its namespace was auto, what was found of it).
PlannedMemo = dict[WorkloadKey, tuple[wl.Workload, bool, Candidate]]


def planned_gangs(workloads: wl.Workloads, config: Config,
                  auto_namespaces: frozenset[str] = frozenset(),
                  memo: PlannedMemo | None = None) -> dict[str, wl.Workload]:
    """Gang key -> the workload it is released as created from
    (docs/decisions/034-release-as-created.md): every workload whose slots all belong to
    one Troupe gang that takes all of its members, that releases as created (its
    template's ``troupe.io/release``, else the workload's, else ``releaseMode``), whose
    members join no SharedDeviceGroup, and that still runs pods; also any workload that
    carries a reservation (so a stale one is dropped), unless a condition has ended it: a
    finished workload is never planned, and its record, which holds nothing, goes with it
    (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md; one whose
    deadline has run out is planned, and :func:`~reconciler.engine.decision.decide.decide`,
    which knows the time, neither reserves it nor writes to it). A workload another supported
    workload controls (a JobSet's child Job) makes no gang, nor do two workloads whose
    slots name one gang. In ``auto_namespaces`` (labelled
    ``troupe.io/gang-mode: auto``), and for a template that asks with Kueue's topology
    annotations and is not Kueue's (:func:`kueue_topology_template`), a template without
    gang keys counts as ``<prefix>-size: auto``, as the webhook stamps its pods.

    ``memo``: what was found of each workload by an earlier call with the same ``config``
    (the caller keeps it; entries of workloads no longer in ``workloads`` are dropped): a
    workload read again only when its object changed (the same object: the same answer), so
    a stream of Jobs costs each Job's read once, not once per Job event
    (docs/decisions/068-release-pipeline.md)."""
    out: dict[str, wl.Workload] = {}
    claimed: dict[str, int] = {}
    for w in workloads.objects.values():
        auto = w.namespace in auto_namespaces
        kept = memo.get(w.key) if memo is not None else None
        if kept is not None and kept[0] is w and kept[1] == auto:
            found = kept[2]
        else:
            found = _candidate(w, config, auto)
            if memo is not None:
                memo[w.key] = (w, auto, found)
        if found is None:
            continue
        key, planned = found
        claimed[key] = claimed.get(key, 0) + 1
        if planned is not None:
            out[key] = planned
    if memo is not None and len(memo) > len(workloads.objects):
        for gone in [k for k in memo if k not in workloads.objects]:
            del memo[gone]
    return {key: w for key, w in out.items() if claimed[key] == 1}  # a gang of several workloads: when complete


def _candidate(w: wl.Workload, config: Config, auto: bool) -> Candidate:
    """What :func:`planned_gangs` finds of one workload ``w`` (``auto``: its namespace is
    labelled ``troupe.io/gang-mode: auto``)."""
    slots = w.slots
    if not slots or w.owned or w.finished:
        return None
    keys = gang_keys(config.gang_annotation_prefix)
    first = slots[0]
    if not any(k in first.gang_annotations for k in keys.all()) and (auto or kueue_topology_template(first)):
        size_auto = {**first.gang_annotations, keys.size: contract.AUTO_SIZE}
        slots = tuple(replace(s, gang_annotations=size_auto) for s in slots)
        w = replace(w, slots=slots)
        first = slots[0]
    key = gang_key(first, config)
    if key is None or key.partition("/")[2].startswith("pod:") or gang_key(slots[-1], config) != key:
        return None
    if w.record is not None:
        return key, w
    try:
        mode = parse_release_mode(first.gang_annotations, w.release or config.release_mode)
    except ContractError:
        mode = WHEN_COMPLETE  # the webhook refuses the pods: nothing to plan
    if mode != AS_CREATED or not w.active or any(s.device_group for s in slots):
        return key, None
    size = first.gang_annotations.get(keys.size)
    if size != contract.AUTO_SIZE and size != str(len(slots)):
        return key, None  # a named gang of other members too: released when complete
    return key, w


def kueue_topology_template(slot: PodInfo) -> bool:
    """True when a workload's pod template (its first slot) asks for a placement with
    Kueue's topology annotations, names none of Troupe's topology keys and carries no mark
    of a workload Kueue admitted: the webhook makes its pods gang members
    (docs/decisions/039-kueue-annotations.md)."""
    a = slot.gang_annotations
    return (kueue.asks(a) and not any(k in a for k in contract.TOPOLOGY_KEYS)
            and not kueue.managed_by_kueue(a, slot.labels, slot.gates))


def auto_namespaces(namespaces: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The namespaces (name -> labels) labelled ``troupe.io/gang-mode: auto``."""
    return frozenset(n for n, labels in namespaces.items() if labels.get(contract.GANG_MODE_LABEL) == contract.GANG_MODE_AUTO)
