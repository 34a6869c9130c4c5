"""Shared device groups: the SharedDeviceGroup object, the device inventory, allocation.

Several cooperating pods (a trainer and its sidecars, a group of inference workers) share
the same devices of one node (DESIGN.md "Shared device groups"; the intent of
``seeds/000``, the SharedDeviceGroup scheduler plugin). Here, pure and beside placement:

- :class:`DeviceGroup`: a ``shareddevicegroups.deviceshare.io/v1alpha1`` object as the
  engine reads it (``spec.resources`` name -> count, ``spec.nodeSelector``,
  ``spec.schedulingStrategy``; ``status.phase``, ``status.nodeName``,
  ``status.selectedDevices``).
- :class:`DeviceInventory`: on every opted-in node (label ``deviceshare.io/mode:
  shared``) a resource's devices are the IDs ``0..n-1``, ``n`` its allocatable count; which
  IDs each group holds, rebuilt from the cluster alone, in this order of trust: a pod's
  ``deviceshare.io/selected-devices`` annotation (what its containers see), the group
  recorded in a release's plan record (``reconciler.troupe.io/plan``, while its members
  are still gated), then the group's ``status``. So a restarted reconciler, and the
  simulator, see exactly the IDs in use before it allocates anything, and never hand one
  out twice. A holding whose node no longer exists holds nothing.
- :func:`~reconciler.engine.placement.devicegroups.group_candidates`: where an unbound group may go, best first: nodes opted in that match
  the group's ``nodeSelector``, pass every member's own filters (taints, affinity) and hold
  every member's cpu/memory/pods at once, with enough free IDs of every resource the group
  asks for. ``binpack`` (the default) puts the group on the fitting node with the fewest
  free devices, ``spread`` on the one with the most (``seeds/000`` ``Score``); ties go to
  topology order. The IDs are the lowest free ones, one contiguous run when there is one
  (:func:`pick_ids`).

How many devices of a shared node are free for a group: the node's allocatable count less
the devices every group holds there (the snapshot counts them as used, so no ordinary
gang is planned onto them either) and less what ordinary pods bound to the node request
through ``resources`` (the device plugin gives those pods devices Troupe cannot name, so
they only lower the count). Group pods themselves must not request a shared resource
(the webhook refuses it). ``docs/decisions/018-shared-device-groups.md`` has the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, string, string_map
from troupe.contract import DEVICE_MODE_LABEL, DEVICE_MODE_SHARED
from troupe.errors import quoted

#: ``spec.schedulingStrategy`` values; the first is the default.
STRATEGIES = ("binpack", "spread")
BOUND = "Bound"
PENDING = "Pending"

Devices = Mapping[str, tuple[int, ...]]
"""Device IDs per resource name: ``{"nvidia.com/gpu": (0, 1)}``."""

#: The most devices of one resource a group may ask for: a node's devices of a kind are
#: counted in units, not bytes (the CRD's schema has the same bound).
MAX_GROUP_DEVICES = 1024
#: A counted device is an extended resource: a domain-qualified name outside the
#: ``kubernetes.io`` domain (Kubernetes docs, "Managing Resources for Containers",
#: extended resources), so ``cpu``, ``memory``, ``ephemeral-storage`` and ``hugepages-*``,
#: which are measured, never are. The CRD's schema checks the same pattern.
_DEVICE_RESOURCE = re.compile(r"(?!(?:[^/]*\.)?kubernetes\.io/)[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def device_resource_problem(name: str, count: object) -> str:
    """Why ``name: count`` cannot be a resource of a SharedDeviceGroup (``""``: it can): the
    name must be an extended resource's (:data:`_DEVICE_RESOURCE`), the count an integer
    from 1 to :data:`MAX_GROUP_DEVICES`."""
    if not _DEVICE_RESOURCE.fullmatch(name):
        return ("must be a counted device, an extended resource such as nvidia.com/gpu "
                "(a domain-qualified name outside kubernetes.io; cpu, memory and the like are not devices)")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GROUP_DEVICES:
        shown = repr(count) if isinstance(count, int) and -(10 ** 18) < count < 10 ** 18 else type(count).__name__
        return f"must be an integer from 1 to {MAX_GROUP_DEVICES}, got {shown}"
    return ""


#: A device ID: ASCII digits, at most 9 (``str.isdigit`` takes other scripts' digits, and
#: ``int()`` refuses more than 4,300).
_DEVICE_ID = re.compile(r"[0-9]{1,9}")


def parse_ids(raw: str) -> tuple[int, ...]:
    """``"0,1"`` -> ``(0, 1)``, sorted, without repeats. Raises ``ValueError`` for anything
    that is not a comma-separated list of integers >= 0 (``""`` is no IDs)."""
    if not raw.strip():
        return ()
    ids = []
    for part in raw.split(","):
        part = part.strip()
        if not _DEVICE_ID.fullmatch(part):
            raise ValueError(f"not a device ID: {quoted(part)}")
        ids.append(int(part))
    return tuple(sorted(set(ids)))


def format_ids(ids: Iterable[int]) -> str:
    """``(0, 1)`` -> ``"0,1"``: the form of ``deviceshare.io/selected-devices`` values, of
    ``deviceshare.io/env.<VAR>`` and of ``status.selectedDevices``."""
    return ",".join(str(i) for i in ids)


def parse_selected(raw: str) -> dict[str, tuple[int, ...]]:
    """The ``deviceshare.io/selected-devices`` annotation (JSON, resource name -> ``"0,1"``)
    as :data:`Devices`. Raises ``ValueError`` when it is not that."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of resource name -> \"0,1\"")
    out = {}
    for name, ids in data.items():
        if not isinstance(name, str) or not isinstance(ids, str):
            raise ValueError(f"{name}: expected a string of device IDs such as \"0,1\"")
        out[name] = parse_ids(ids)
    return dict(sorted(out.items()))


def encode_selected(devices: Devices) -> str:
    """:data:`Devices` as the ``deviceshare.io/selected-devices`` annotation value: compact
    JSON with sorted keys."""
    return json.dumps({r: format_ids(ids) for r, ids in sorted(devices.items())}, separators=(",", ":"))


@dataclass(frozen=True)
class DeviceGroup:
    """A SharedDeviceGroup as the engine reads it.

    ``resources``: device count per resource name (each >= 1). ``node_selector``: labels
    the group's node must carry. ``strategy``: ``binpack`` or ``spread``. ``phase``,
    ``node`` and ``selected`` are its status (``""`` and ``{}`` when unset);
    ``conditions`` the status conditions as found. ``deleting``: a deletionTimestamp is set
    (the group is kept by its finalizer until none of its pods runs).
    """

    name: str
    resources: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    strategy: str = STRATEGIES[0]
    phase: str = ""
    node: str = ""
    selected: Devices = field(default_factory=dict)
    conditions: tuple[Mapping[str, Any], ...] = ()
    finalizers: tuple[str, ...] = ()
    deleting: bool = False
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DeviceGroup:
        """A ``SharedDeviceGroup`` object (plain dict). Raises
        :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field: the API
        server's schema refuses most of these, but a snapshot file may hold anything."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec", required=True)
        status = mapping(obj, "status")
        raw = mapping(spec, "resources", "spec", required=True)
        if not raw:
            raise ObjectError("spec.resources", "must name at least one resource")
        resources: dict[str, int] = {}
        for name, count in raw.items():
            problem = device_resource_problem(str(name), count)
            if problem:
                raise ObjectError(f"spec.resources.{name}", problem)
            resources[str(name)] = int(count)
        strategy = string(spec, "schedulingStrategy", "spec", default=STRATEGIES[0])
        if strategy not in STRATEGIES:
            raise ObjectError("spec.schedulingStrategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        selected: dict[str, tuple[int, ...]] = {}
        for name, ids in string_map(status, "selectedDevices", "status").items():
            try:
                selected[name] = parse_ids(ids)
            except ValueError as e:
                raise ObjectError(f"status.selectedDevices.{name}", str(e)) from None
        conditions = status.get("conditions")
        finalizers = meta.get("finalizers")
        return cls(
            name=string(meta, "name", "metadata", required=True),
            resources=dict(sorted(resources.items())),
            node_selector=string_map(spec, "nodeSelector", "spec"),
            strategy=strategy,
            phase=string(status, "phase", "status"),
            node=string(status, "nodeName", "status"),
            selected=dict(sorted(selected.items())),
            conditions=tuple(c for c in conditions if isinstance(c, Mapping)) if isinstance(conditions, list) else (),
            finalizers=tuple(f for f in finalizers if isinstance(f, str)) if isinstance(finalizers, list) else (),
            deleting=meta.get("deletionTimestamp") is not None,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )


@dataclass(frozen=True)
class Holding:
    """Group ``group`` holds ``devices`` on ``node``; ``source`` says what showed it (a pod
    ``namespace/name``, ``plan <plannedAt>``, or ``status``)."""

    group: str
    node: str
    devices: Devices
    source: str = ""


def is_shared(labels: Mapping[str, str]) -> bool:
    """The node opted in to shared device groups (``deviceshare.io/mode: shared``)."""
    return labels.get(DEVICE_MODE_LABEL) == DEVICE_MODE_SHARED


class DeviceInventory:
    """Which device IDs each group holds on which node; see the module docstring.

    ``holdings``: group name -> :class:`Holding` (only on nodes that exist). ``lost``:
    group name -> the node a holding named that no longer exists. ``conflicts``: what the
    evidence disagreed on (two groups claiming one ID, members of one group on different
    nodes or IDs), for logs; the first claim by trust then name wins, and every claimed ID
    stays taken. Built once per snapshot; :meth:`with_holdings` copies.
    """

    def __init__(self) -> None:
        self.holdings: dict[str, Holding] = {}
        self.lost: dict[str, str] = {}
        self.conflicts: list[str] = []
        self._taken: dict[tuple[str, str], dict[int, str]] = {}

    @classmethod
    def build(cls, node_names: Iterable[str], groups: Mapping[str, DeviceGroup],
              pod_claims: Iterable[Holding], plan_claims: Iterable[Holding]) -> DeviceInventory:
        """The inventory from the evidence, by trust: ``pod_claims`` (one per active pod
        with a selected-devices annotation and a node; a pod's annotation is what its
        containers see), ``plan_claims`` (groups recorded by plan records of releases in
        progress), then each group's status (``Bound`` with a node). Claims of groups that
        no longer exist still take their IDs (their pods may still run with them)."""
        inv = cls()
        nodes = set(node_names)
        ordered: list[tuple[int, Holding]] = []
        for trust, claims in enumerate((pod_claims, plan_claims)):
            ordered.extend((trust, h) for h in claims)
        for g in groups.values():
            if g.phase == BOUND and g.node and g.selected:
                ordered.append((2, Holding(g.name, g.node, g.selected, "status")))
        for _, h in sorted(ordered, key=lambda t: (t[0], t[1].group, t[1].source)):
            if h.node not in nodes:
                inv.lost.setdefault(h.group, h.node)
                continue
            first = inv.holdings.get(h.group)
            if first is None:
                inv.holdings[h.group] = h
                inv.lost.pop(h.group, None)
            elif (first.node, dict(first.devices)) != (h.node, dict(h.devices)):
                inv.conflicts.append(
                    f"group {h.group}: {h.source} says {h.node} {_describe(h.devices)}, "
                    f"but {first.source} says {first.node} {_describe(first.devices)} (kept)")
            inv._take(h)
        return inv

    def _take(self, h: Holding) -> None:
        for resource, ids in h.devices.items():
            taken = self._taken.setdefault((h.node, resource), {})
            for i in ids:
                owner = taken.setdefault(i, h.group)
                if owner != h.group:
                    self.conflicts.append(f"node {h.node} {resource} {i}: held by {owner} and claimed by "
                                          f"{h.group} ({h.source})")

    def with_holdings(self, added: Iterable[Holding]) -> DeviceInventory:
        """A copy in which ``added`` are held too (groups just bound by a plan)."""
        other = DeviceInventory()
        other.holdings = dict(self.holdings)
        other.lost = dict(self.lost)
        other.conflicts = list(self.conflicts)
        other._taken = {k: dict(v) for k, v in self._taken.items()}
        for h in added:
            other.holdings[h.group] = h
            other.lost.pop(h.group, None)
            other._take(h)
        return other

    def taken(self, node: str, resource: str) -> Mapping[int, str]:
        """Device ID -> holding group, on ``node`` for ``resource``."""
        return self._taken.get((node, resource), {})


def _describe(devices: Devices) -> str:
    return ", ".join(f"{r} [{format_ids(ids)}]" for r, ids in sorted(devices.items())) or "no devices"


def pick_ids(total: int, taken: Iterable[int], count: int) -> tuple[int, ...] | None:
    """The ``count`` IDs of ``0..total-1`` to give a group: the lowest run of ``count``
    consecutive free IDs when there is one, else the lowest free IDs; None when fewer than
    ``count`` are free. ``taken`` are the IDs other groups hold. Walks the gaps between
    taken IDs: the cost follows ``taken`` and ``count``, never ``total``."""
    busy = sorted({i for i in taken if 0 <= i < total})
    if total - len(busy) < count:
        return None
    gaps = []  # (first free ID, how many) between taken IDs, in order
    previous = -1
    for i in [*busy, total]:
        if i - previous > 1:
            gaps.append((previous + 1, i - previous - 1))
        previous = i
    run = next((start for start, size in gaps if size >= count), None)
    if run is not None:
        return tuple(range(run, run + count))
    lowest: list[int] = []
    for start, size in gaps:
        lowest.extend(range(start, start + min(size, count - len(lowest))))
        if len(lowest) == count:
            break
    return tuple(lowest)


@dataclass(frozen=True)
class Candidate:
    """A node an unbound group may be bound to: its index, name, the IDs it would get, and
    ``free`` devices left of the group's resources before binding (what the strategy
    orders by)."""

    index: int
    node: str
    devices: Devices
    free: int


def order_candidates(found: Sequence[Candidate], strategy: str) -> list[Candidate]:
    """``binpack``: fewest free devices first; ``spread``: most first; then topology
    order (the node index)."""
    sign = -1 if strategy == "spread" else 1
    return sorted(found, key=lambda c: (sign * c.free, c.index))
