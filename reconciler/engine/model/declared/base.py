"""What a way of declaring a gang gives, whatever the source
(docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md): :class:`Source`, its gang
key for a pod and its gang's :class:`Shape`, and what the sources share: Troupe's gang keys
sizing a gang (:func:`keyed`), a gang of one (:func:`alone`), and the members' disagreement
(:func:`disagreement`).

Pure: plain data in (:class:`~reconciler.engine.model.pods.PodInfo`,
:class:`~reconciler.engine.model.workloads.Workloads`), plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import troupe.contract as contract
import troupe.kueue as kueue
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared.memberkeys import gang_keys, member_keys
from reconciler.engine.model.declared.queued import beyond_queued_workload, keys_fix
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config
from troupe.errors import MAX_QUOTED, ContractError, quoted
from troupe.policies import GANG_POLICY_KEYS

#: Annotation keys whose values every member must share (DESIGN.md "Gangs": members
#: whose size or timeout disagree are held; a topology request is the gang's, too).
AGREE_ON_TOPOLOGY = (*contract.TOPOLOGY_KEYS, *GANG_POLICY_KEYS, *kueue.TOPOLOGY_KEYS)


@dataclass(frozen=True)
class Shape:
    """A gang's shape: what its source declares of its size, its wait and its requests,
    the part of :class:`~reconciler.engine.gangs.gang.Gang` a source decides (the fields
    mean what they mean there).

    ``namespace``, ``name`` (the key's parts) and ``members`` (active, in rank order, at
    least one) are given; ``size`` (None while the gang settles or waits), ``min_size``
    (None: ``size``), ``size_from`` (what a size the members do not state was read from),
    ``settle_at`` (seconds since the epoch; ``inf`` while a workload or group object is not
    known, ``workload_missing`` saying why), ``held`` (why the members cannot be released,
    ``""``), ``topology``, ``timeout_seconds`` (capped) and ``priority`` come in as the
    members ask and leave as the source decides."""

    namespace: str
    name: str
    members: tuple[PodInfo, ...]
    timeout_seconds: int
    topology: contract.TopologyRequest = field(default_factory=contract.TopologyRequest)
    held: str = ""
    priority: int = 0
    size: int | None = None
    min_size: int | None = None
    size_from: str = ""
    settle_at: float = 0.0
    workload_missing: str = ""


@dataclass(frozen=True)
class Sizing:
    """What sizes a gang beside its members: the ``config``, ``parallelism`` (a Job's
    ``(namespace, name)`` -> its ``spec.parallelism``, for GKE's auto-gangs) and the
    ``workloads`` (workload, owner and pod group objects known)."""

    config: Config
    parallelism: Mapping[tuple[str, str], int]
    workloads: wl.Workloads


class Source:
    """One way a gang is declared: :meth:`key` says whether a pod is declared so, and its
    gang; :meth:`shape` sizes a gang whose first member it keyed. The sources are tried in
    the order of :data:`reconciler.engine.model.declared.SOURCES`, the first key wins."""

    #: How the source is named (``annotations``, ``workload``, ``pod group``, ...).
    name: str = ""

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """The key (``namespace/id``) of the gang ``pod`` is declared to be in by this
        source, or None when this source does not declare it."""
        raise NotImplementedError

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """``shape`` (its members keyed by this source) sized as this source declares it.
        Never raises: what cannot be read holds the gang, with the reason."""
        raise NotImplementedError


def annotated(pod: PodInfo, config: Config) -> bool:
    """``pod`` carries any of Troupe's gang keys (``<prefix>-name``, ``-size``,
    ``-schedule-timeout-seconds``, ``-min-size``)."""
    return any(k in pod.gang_annotations for k in gang_keys(config.gang_annotation_prefix).all())


def named_key(pod: PodInfo, config: Config) -> str:
    """The key of the gang ``pod``'s ``<prefix>-name`` names, or the pod's own gang of one
    (``<namespace>/pod:<name>``) when that name cannot be read (the gang is then held)."""
    if member_keys(pod, config).named:
        return f"{pod.namespace}/{pod.gang_annotations[gang_keys(config.gang_annotation_prefix).name]}"
    return f"{pod.namespace}/pod:{pod.name}"


def disagreement(members: Iterable[PodInfo], keys: Iterable[str]) -> str:
    """A message naming the keys the members disagree on (values sorted), or ``""``."""
    values: dict[str, set[str]] = {}
    for pod in members:
        for k in keys:
            value = pod.gang_annotations.get(k, "<unset>")
            values.setdefault(k, set()).add(value if len(value) <= MAX_QUOTED else quoted(value))
    differing = [f"{k}: {', '.join(sorted(v))}" for k, v in values.items() if len(v) > 1]
    return "members disagree on " + "; ".join(differing) + " (held until they agree)" if differing else ""


def keyed(shape: Shape, sizing: Sizing) -> Shape:
    """A gang sized by Troupe's gang keys (``seeds/001``): the first member's size,
    timeout and minimum; held when a member's keys cannot be read, when the members
    disagree, or when a workload queued in Kueue can never fill its minimum
    (docs/decisions/066-queued-minimum-by-every-source.md)."""
    keys = gang_keys(sizing.config.gang_annotation_prefix)
    specs = []
    for pod in shape.members:
        read = member_keys(pod, sizing.config)
        if read.spec_error:
            return replace(shape, held=shape.held or f"member {pod.name}: {read.spec_error} (held until it is fixed)")
        if read.spec is not None:
            specs.append(read.spec)
    if not specs:
        return replace(shape, held=f"member {shape.members[0].name} carries none of the gang annotations")
    disagree = disagreement(shape.members, (keys.size, keys.timeout, keys.min_size, *AGREE_ON_TOPOLOGY))
    shape = replace(shape, size=specs[0].size, timeout_seconds=specs[0].timeout_seconds,
                    held=shape.held or disagree, min_size=specs[0].min_size)
    key = keys.min_size if shape.min_size else keys.size
    return replace(shape, held=shape.held or beyond_queued_workload(
        shape.members, shape.min_size or shape.size, f"annotation {key}", keys_fix(keys), sizing.workloads))


def alone(shape: Shape, sizing: Sizing) -> Shape:
    """A gang of one (``<namespace>/pod:<name>``): size 1, unless its member carries
    Troupe's gang keys (an unreadable name): then :func:`keyed`, which holds it."""
    if annotated(shape.members[0], sizing.config):
        return keyed(shape, sizing)
    return replace(shape, size=1, held=shape.held or disagreement(shape.members, AGREE_ON_TOPOLOGY))


def workload_sized(shape: Shape, sizing: Sizing) -> Shape:
    """A gang of ``<prefix>-size: auto`` members (or a KAI-adopted workload's): sized by
    its workload object, with the workload's topology request when the members make none;
    waiting, with the reason, while the workload is not known
    (docs/decisions/014-workload-gangs.md)."""
    found = wl.group(shape.members[0])
    if found is None:  # the workload source holds such a gang before it gets here
        return shape
    config = sizing.config
    keys = gang_keys(config.gang_annotation_prefix)
    disagree = disagreement(shape.members, (keys.size, keys.timeout, keys.min_size, *AGREE_ON_TOPOLOGY))
    timeout, minimum = shape.timeout_seconds, None
    read = member_keys(shape.members[0], config)
    if read.spec_error:
        return replace(shape, held=f"member {shape.members[0].name}: {read.spec_error} (held until it is fixed)")
    spec = read.spec
    if spec is not None:
        timeout, minimum = spec.timeout_seconds, spec.min_size
    shape = replace(shape, timeout_seconds=timeout, held=shape.held or disagree, min_size=minimum)
    workload = sizing.workloads.objects.get(found[1])
    if workload is None:
        return replace(shape, settle_at=float("inf"), workload_missing=sizing.workloads.missing(found[1]))
    topology, held = shape.topology, shape.held or workload.too_large
    member_asks = any(k in shape.members[0].gang_annotations for k in AGREE_ON_TOPOLOGY)
    if workload.topology and not member_asks:
        try:
            topology = contract.parse_topology_annotations(workload.topology, config)
        except ContractError as e:
            held = held or f"{workload.kind} {workload.name}: {e}"
    if minimum is None and workload.min_size is not None:
        minimum = workload.min_size
        shape = replace(shape, min_size=minimum)
    if minimum is not None and minimum > workload.size and not held:
        held = (f"annotation {keys.min_size}: {minimum} is more than the gang's {workload.size} members "
                f"({workload.size_from}) (held until it is fixed)")
    return replace(shape, size=workload.size, size_from=workload.size_from, topology=topology, held=held)
