"""Placing a gang whose members share devices: groups bound to nodes, IDs chosen, then the
gang placed with every group member on its group's node. All or nothing, as placement.

The members of one SharedDeviceGroup all run on the group's node and see the same device
IDs (DESIGN.md "Shared device groups", ``seeds/000``). For the gated members of a gang:

1. A member's group must exist and not be being deleted (:func:`group_problem`; otherwise
   the gang is held).
2. A group that already holds devices (:class:`~reconciler.engine.model.devicegroups.DeviceInventory`)
   keeps its node and IDs: its members may go only there (their node filter is narrowed to
   that node, :meth:`~reconciler.engine.model.selectors.NodeFilter.on_node`).
3. A group that holds nothing is bound now: its candidate nodes, best first by its
   strategy (:func:`group_candidates`), are tried in turn (at most
   :data:`MAX_CANDIDATES` per group and :data:`MAX_TRIALS` in all, so a gang of several
   new groups costs a bounded number of placements), each with the IDs it would get held,
   until the whole gang places (:func:`~reconciler.engine.placement.place.place_gang`: members
   of groups on their nodes, the others wherever topology puts them; a gang spanning two
   groups lands each member on its group's node). Two groups bound by one gang to the
   same node get disjoint IDs.

The result says which groups the plan binds (they hold their devices from the moment the
plan is recorded) and which IDs every group member gets.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.engine.filters import noderesources, profile
from reconciler.engine.filters.nodeaffinity import SELECTOR_MISMATCH
from reconciler.engine.filters.status import Code, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.devicegroups import (
    BOUND,
    PENDING,
    Candidate,
    DeviceGroup,
    Devices,
    Holding,
    format_ids,
    order_candidates,
    pick_ids,
)
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import NO_REQUEST, PlacementResult, place_gang
from troupe.contract import DEVICE_MODE_LABEL, DEVICE_MODE_SHARED, TopologyRequest

#: Candidate nodes tried per unbound group, best first.
MAX_CANDIDATES = 8
#: Combinations of candidate nodes tried for a gang binding several groups at once.
MAX_TRIALS = 16
NOT_SHARED = f"not opted in ({DEVICE_MODE_LABEL}={DEVICE_MODE_SHARED})"


@dataclass(frozen=True)
class DevicePlacement:
    """A gang's placement with its devices. ``result``: the placement (members of groups
    on their groups' nodes). ``bindings``: the groups this plan binds (they held nothing
    before), with their node and IDs. ``devices``: pod key -> the IDs of its group, for
    every placed group member."""

    result: PlacementResult
    bindings: tuple[Holding, ...] = ()
    devices: Mapping[PodKey, Devices] = field(default_factory=dict)


def group_problem(snapshot: Snapshot, members: Sequence[PodInfo]) -> str:
    """Why members that join a group cannot be released at all (``""``: none): a group
    that does not exist, cannot be read, or is being deleted. Checked for every member, in
    rank order; the first problem is the reason."""
    for pod in members:
        name = pod.device_group
        if not name:
            continue
        if name in snapshot.group_errors:
            return f"member {pod.name}: SharedDeviceGroup {name} cannot be read: {snapshot.group_errors[name]}"
        group = snapshot.groups.get(name)
        if group is None:
            return f"member {pod.name}: SharedDeviceGroup {name} does not exist (create it, or fix deviceshare.io/group)"
        if group.deleting:
            return f"member {pod.name}: SharedDeviceGroup {name} is being deleted"
    return ""


#: Why a shared node takes no group, before the pods' own filters: not opted in, or not
#: matched by the group's ``nodeSelector``.
GROUP_MISMATCH = f"group {SELECTOR_MISMATCH}"
#: The words before a resource whose device IDs a shared node has too few of free.
TOO_FEW = "too few free"


def _fits_together(free: Mapping[str, int], members: Sequence[PodInfo]) -> Status | None:
    total: Counter[str] = Counter()
    for pod in members:
        total.update(pod.requests)
    return noderesources.check(free, total)


def group_candidates(snapshot: Snapshot, group: DeviceGroup, members: Sequence[PodInfo],
                     extra: Sequence[Holding] = ()) -> tuple[list[Candidate], str]:
    """The nodes ``group`` may be bound to for ``members`` (its gated pods of one gang),
    best first by its strategy, with the IDs each would give; and, when there are none,
    why: ``no shared node has 6 free nvidia.com/gpu; largest free: 4 on node d (3 nodes
    excluded: ...)``. ``extra``: holdings of the same plan, tried alongside (their IDs are
    taken too)."""
    table, inv = snapshot.table, snapshot.devices
    filters = list(dict.fromkeys(p.node_filter for p in members))
    eligible = [snapshot.eligible(f) for f in filters]
    out: list[Candidate] = []
    excluded: Counter[str] = Counter()  # this module's own reasons before the plugins'
    refused: Counter[Status] = Counter()  # the plugins'
    few: Counter[str] = Counter()  # nodes with too few free IDs, by resource
    best: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(snapshot.nodes):
        if not table.shared[i]:
            excluded[NOT_SHARED] += 1
            continue
        if any(node.labels.get(k) != v for k, v in group.node_selector.items()):
            excluded[GROUP_MISMATCH] += 1
            continue
        failed = next((f for f, ok in zip(filters, eligible, strict=True) if not ok[i]), None)
        free = snapshot.free(i)
        if failed is not None:
            status = profile.node_status(failed, node)
            if status is not None:
                refused[status] += 1
            continue
        short = _fits_together(free, members)
        if short is not None:
            refused[short] += 1
            continue
        devices: dict[str, tuple[int, ...]] = {}
        left = 0
        for r, count in group.resources.items():
            total = node.allocatable.get(r, 0)
            taken = {**inv.taken(node.name, r), **{i: h.group for h in extra if h.node == node.name
                                                     for i in h.devices.get(r, ())}}
            extra_units = sum(len(h.devices.get(r, ())) for h in extra if h.node == node.name)
            available = max(0, min(total - len(taken), free.get(r, 0) - extra_units))
            if best.get(r, (-1, ""))[0] < available:
                best[r] = (available, node.name)
            ids = pick_ids(total, taken, count) if available >= count else None
            if ids is None:
                devices = {}
                few[r] += 1
                break
            devices[r] = ids
            left += available
        if devices:
            out.append(Candidate(i, node.name, devices, left))
    if out:
        return order_candidates(out, group.strategy), ""
    return [], _shortage(group, excluded, refused, few, best, len(snapshot.nodes))


def _shortage(group: DeviceGroup, excluded: Counter[str], refused: Counter[Status], few: Counter[str],
              best: Mapping[str, tuple[int, str]], nodes: int) -> str:
    """Why no shared node takes ``group``, in the order the checks run: this module's own
    (``excluded``: not opted in, the group's selector), the plugins' (``refused``, nodes per
    status, in profile order), then the resources whose free device IDs are too few
    (``few``, by name)."""
    want = ", ".join(f"{n} {r}" for r, n in group.resources.items())
    if excluded[NOT_SHARED] == nodes:
        return (f"SharedDeviceGroup {group.name} ({want}): no node is opted in to shared devices "
                f"(label {DEVICE_MODE_LABEL}={DEVICE_MODE_SHARED})")
    short = [(r, n) for r, n in group.resources.items() if r in best and best[r][0] < n]
    if short:
        r, n = short[0]
        free, node = best[r]
        head = f"no shared node has {n} free {r}; largest free: {free} on node {node}"
    else:
        head = "no shared node fits"
    first = [(k, excluded[k]) for k in (NOT_SHARED, GROUP_MISMATCH) if excluded[k]]
    last = [(f"{TOO_FEW} {r}", n) for r, n in sorted(few.items())]
    listed = profile.render([*first, *profile.listed(refused), *last])
    total = sum(excluded.values()) + sum(refused.values()) + sum(few.values())
    return f"SharedDeviceGroup {group.name} ({want}): {head} ({total} nodes excluded: {listed})"


def place_with_devices(snapshot: Snapshot, members: Sequence[PodInfo], request: TopologyRequest = NO_REQUEST, *,
                       near: Sequence[str] = ()) -> DevicePlacement:
    """Place ``members`` (a gang's gated pods) with their groups (module docstring);
    ``request`` and ``near`` as for :func:`place_gang`.
    Assumes :func:`group_problem` found nothing. ``snapshot`` is not changed."""
    by_group: dict[str, list[PodInfo]] = {}
    for pod in members:
        if pod.device_group:
            by_group.setdefault(pod.device_group, []).append(pod)
    if not by_group:
        return DevicePlacement(place_gang(snapshot, members, request, near=near))
    inv = snapshot.devices
    fixed = {g: inv.holdings[g] for g in sorted(by_group) if g in inv.holdings}
    unbound = [g for g in sorted(by_group) if g not in fixed]
    options: list[list[Candidate]] = []
    for g in unbound:
        found, why = group_candidates(snapshot, snapshot.groups[g], by_group[g])
        if not found:
            return DevicePlacement(PlacementResult(False, [], Code.UNSCHEDULABLE, why))
        options.append(found[:MAX_CANDIDATES])
    last: PlacementResult | None = None
    for trial in itertools.islice(itertools.product(*options), MAX_TRIALS):
        bindings: list[Holding] = []
        ok = True
        for g, cand in zip(unbound, trial, strict=True):
            if any(h.node == cand.node for h in bindings):  # a second new group on that node: IDs again
                again, _ = group_candidates(snapshot, snapshot.groups[g], by_group[g], bindings)
                cand = next((c for c in again if c.node == cand.node), None)  # type: ignore[assignment]
                if cand is None:
                    ok = False
                    break
            bindings.append(Holding(g, cand.node, cand.devices, "plan"))
        if not ok:
            continue
        holdings = {**fixed, **{h.group: h for h in bindings}}
        narrowed = [replace(p, node_filter=p.node_filter.on_node(holdings[p.device_group].node))
                    if p.device_group else p for p in members]
        view = snapshot.with_assumed(None, bindings) if bindings else snapshot
        result = place_gang(view, narrowed, request, near=near)
        if result.placed:
            devices = {p.key: holdings[p.device_group].devices for p in members if p.device_group}
            return DevicePlacement(result, tuple(bindings), devices)
        last = result
    if last is None:  # every trial put two new groups on a node without room for both
        return DevicePlacement(PlacementResult(False, [], Code.UNSCHEDULABLE, _no_joint_binding(snapshot, unbound, options)))
    groups = ", ".join(f"{g} on {h.node}" for g, h in fixed.items())
    where = f"members of SharedDeviceGroup {groups} must run there: " if groups and not unbound else ""
    if unbound:
        where = f"tried {min(MAX_TRIALS, _product(options))} node choice(s) for SharedDeviceGroup {', '.join(unbound)}: "
    return DevicePlacement(replace(last, reason=where + last.reason))


def _no_joint_binding(snapshot: Snapshot, unbound: Sequence[str], options: Sequence[Sequence[Candidate]]) -> str:
    """Why no trial bound every new group of a gang: each fits some shared node alone, but
    every choice put two of them on a node without room for both. Names each group with
    what it asks and the largest free count a candidate node offers."""
    wants = ", ".join(f"{g} ({', '.join(f'{n} {r}' for r, n in snapshot.groups[g].resources.items())})"
                      for g in unbound)
    best = max((c for found in options for c in found), key=lambda c: (c.free, c.node), default=None)
    largest = f"; largest free: {best.free} on node {best.node}" if best is not None else ""
    return (f"SharedDeviceGroups {wants}: each fits a shared node alone, but no choice of nodes holds them all "
            f"(tried {min(MAX_TRIALS, _product(options))} node choice(s){largest})")


def _product(options: Sequence[Sequence[object]]) -> int:
    n = 1
    for o in options:
        n *= len(o)
    return n


@dataclass(frozen=True)
class GroupView:
    """What a SharedDeviceGroup's status should say: ``phase`` (``Bound`` or
    ``Pending``), its ``node`` and ``devices`` when bound, and the ``reason`` and
    ``message`` of its ``Allocated`` condition (``Allocated``; ``NodeLost``,
    ``InsufficientDevices``, ``WaitingForGang``, ``NoPods`` while pending)."""

    name: str
    phase: str
    node: str = ""
    devices: Devices = field(default_factory=dict)
    reason: str = ""
    message: str = ""

    def status(self) -> dict[str, object]:
        """The status fields this view sets (``phase``, ``nodeName``,
        ``selectedDevices`` as ``"0,1"`` strings); conditions are the caller's."""
        out: dict[str, object] = {"phase": self.phase}
        if self.node:
            out["nodeName"] = self.node
        if self.devices:
            out["selectedDevices"] = {r: format_ids(ids) for r, ids in self.devices.items()}
        return out


def group_view(snapshot: Snapshot, group: DeviceGroup, pods: Sequence[PodInfo]) -> GroupView:
    """The status ``group`` should have on ``snapshot``; ``pods`` are the pods that join it.

    Bound while it holds devices on an existing node (:class:`~reconciler.engine.model.devicegroups.DeviceInventory`). Otherwise
    Pending, and why: its node is gone (it is bound again by its next pod); no shared node
    fits its gated pods (the shortage, with numbers); a node fits and its pods wait for
    their gangs; or no pod waits to join it."""
    held = snapshot.devices.holdings.get(group.name)
    if held is not None:
        return GroupView(group.name, BOUND, held.node, held.devices, "Allocated",
                         f"{_describe_devices(held.devices)} on node {held.node}")
    lost = snapshot.devices.lost.get(group.name)
    if lost is not None:
        return GroupView(group.name, PENDING, reason="NodeLost",
                         message=f"node {lost} no longer exists; the group is bound again by its next pod")
    waiting = sorted((p for p in pods if p.active and p.gated), key=lambda p: (p.rank, p.key))
    if not waiting:
        return GroupView(group.name, PENDING, reason="NoPods", message="no pod waits to join the group")
    found, why = group_candidates(snapshot, group, waiting)
    if not found:
        return GroupView(group.name, PENDING, reason="InsufficientDevices", message=why)
    best = found[0]
    return GroupView(group.name, PENDING, reason="WaitingForGang",
                     message=f"{len(found)} shared node(s) fit ({group.strategy}: {best.node} first); "
                             f"{len(waiting)} pod(s) wait for their gang to be placed")


def _describe_devices(devices: Devices) -> str:
    return ", ".join(f"{r} {format_ids(ids)}" for r, ids in sorted(devices.items()))
