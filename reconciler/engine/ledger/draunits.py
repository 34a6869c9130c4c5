"""Dynamic Resource Allocation counted as units the way extended resources are: what a node
offers and what a pod requests of the devices its claims ask for (docs/decisions/044-dra.md).

The objects are parsed in the model (:mod:`reconciler.engine.model.dra`: devices, classes,
claims, templates); this module counts them. Troupe plans with the same units as everywhere
else: every distinct request shape (a DeviceClass and the request's own selectors) becomes
one resource named ``devices/<class>`` (``devices/<class>~<hash>`` with request selectors:
16 hex digits of the selectors' sha256, longer when two different shapes of one snapshot
share them, so no shape ever stands for another tenant's), which

- a node offers as many units of as it has devices matching the class's and the request's
  selectors (:mod:`reconciler.engine.model.cel`) that no claim has been allocated;
- a pod requests as many units of as its claims not yet allocated ask for (a claim shared
  by several pods is counted once, on the one placed, else the first in name order);
- a claim allocated, or shared with a pod placed already, holds every pod that uses it to
  its node: the node offers ``resourceclaim/<ns>/<name>`` and each pod requests one unit of
  it; the pod its devices are counted on keeps asking for them, so evicting it frees them
  (what preemption plans with), and a device allocated to a claim no pod of the snapshot
  asks for counts for no one;
- a claim shared by pods none of which is placed yet holds the ones it is not counted on
  to the nodes with the free devices to allocate it now: each such node offers its
  ``resourceclaim/<ns>/<name>`` too, so a sharer decided before the one it is counted on
  is never pinned where kube-scheduler could not allocate the claim. (Such pods are not
  held to one node among those: see decision 044.)

So placement, preemption (evicting a victim frees its claim's devices only once the claim
is deallocated, which the snapshot then shows), the simulator and ``kubectl troupe`` count
DRA devices as they count ``nvidia.com/gpu``, and a plan never names a node with fewer free
matching devices than its members there need (a hypothesis property,
``tests/engine/ledger/test_dra.py``). What cannot be counted so (an unknown class, a
selector cel-python cannot evaluate, ``allocationMode: All``, a claim or template that does
not exist) holds the pod's gang with a reason that quotes it.

Selectors are tenants' programs (decision 049): one costing more than
:data:`~reconciler.engine.model.cel.MAX_COST` holds only the gangs that ask for it, and the
evaluations one decision makes are charged to the namespaces whose pods ask for each shape,
:data:`SELECTOR_BUDGET` units each (:func:`node_units`): a shape none of whose namespaces has
budget left is not counted for now, which holds only its own gangs, while every answer
found is memoized for the next decisions.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reconciler.engine.model import cel
from reconciler.engine.model.dra import Catalog, Claim, Device, DeviceKey, Request, level_attributes
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo

T = TypeVar("T")

#: The prefix of the resources DRA requests are counted as.
DEVICES = "devices/"
#: The prefix of the resource that holds a pod to the node its allocated claim is on.
CLAIM = "resourceclaim/"
#: Consumers one ResourceClaim may have (``status.reservedFor``'s limit in the API).
MAX_CONSUMERS = 256
#: Units (:func:`~reconciler.engine.model.cel.cost`) of selector evaluations one namespace's
#: request shapes may take per decision: about one second of cel-python.
SELECTOR_BUDGET = 2_000_000
#: What one evaluation is charged at least: cel-python's fixed cost of a call (~0.25 ms).
EVALUATION_FLOOR = 500


def kind_of(request: Request, taken: Mapping[str, tuple[str, ...]] | None = None) -> str:
    """The resource a request is counted as: ``devices/<class>``, with ``~`` and 16 hex
    digits of the sha256 of its own selectors when it has any; given the shapes named
    already (``taken``: resource -> the class's and request's selectors), all 64 digits
    when the 16 stand for other selectors there, so two shapes never share a name."""
    if not request.selectors:
        return f"{DEVICES}{request.class_name}"
    digest = hashlib.sha256("\n".join(request.selectors).encode()).hexdigest()
    short = f"{DEVICES}{request.class_name}~{digest[:16]}"
    if taken is not None and short in taken and taken[short][-len(request.selectors):] != request.selectors:
        return f"{DEVICES}{request.class_name}~{digest}"
    return short


@dataclass
class _Demand:
    requests: dict[str, dict[str, int]] = field(default_factory=dict)  # pod key -> resource -> units
    problems: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)  # resource -> selectors (class + request)
    owners: dict[str, set[str]] = field(default_factory=dict)  # resource -> namespaces whose pods ask for it
    pins: dict[str, str] = field(default_factory=dict)  # claim resource -> node
    charged: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # claim -> kinds a pod asks for it
    units: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # claim -> kind -> units it asks
    unplaced: set[tuple[str, str]] = field(default_factory=set)  # claims no consumer is placed with, yet shared


def _claim_of(pod: PodInfo, entry: tuple[str, str, str], c: Catalog) -> tuple[Claim | None, tuple[Request, ...], str]:
    """``(claim, requests, problem)`` of one entry of ``spec.resourceClaims``."""
    entry_name, claim_name, template_name = entry
    if claim_name:
        found = c.claims.get((pod.namespace, claim_name))
        if found is not None:
            return found, found.requests, ""
    if template_name:
        requests = c.templates.get((pod.namespace, template_name))
        if requests is None:
            return None, (), f"ResourceClaimTemplate {pod.namespace}/{template_name} (claim {entry_name}) not found"
        return None, requests, ""
    return None, (), f"ResourceClaim {pod.namespace}/{claim_name or entry_name} (claim {entry_name}) not found"


def _placed(pod: PodInfo) -> str:
    return pod.node_name or pod.assigned_node


def _sharing(pods: Sequence[PodInfo], c: Catalog) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """For each existing claim its pods use: the pod its devices are counted on (the one
    placed, else the first by name) and the node a placed consumer is on (``""`` when none)."""
    charged: dict[tuple[str, str], str] = {}
    node: dict[tuple[str, str], str] = {}
    for pod in pods:
        for _, claim_name, _ in pod.claims:
            key = (pod.namespace, claim_name)
            if not claim_name or key not in c.claims:
                continue
            if _placed(pod) and not node.get(key):
                node[key], charged[key] = _placed(pod), pod.key
            charged.setdefault(key, pod.key)
    return charged, node


def _demand(pods: Sequence[PodInfo], c: Catalog) -> _Demand:
    d = _Demand()
    users = sorted((p for p in pods if p.claims and not p.terminal), key=lambda p: p.key)
    charged, placed_on = _sharing(users, c)
    for pod in users:
        wanted: dict[str, int] = {}
        for entry in pod.claims:
            found, requests, problem = _claim_of(pod, entry, c)
            if problem:
                d.problems.setdefault(pod.key, []).append(problem)
                continue
            key = (found.namespace, found.name) if found is not None else None
            if found is not None and key is not None:
                node = found.node if found.allocated else placed_on.get(key, "")
                pin = f"{CLAIM}{found.namespace}/{found.name}"
                if node:  # allocated there, or a consumer placed there: every consumer goes there
                    d.pins[pin] = node
                    wanted[pin] = 1
                if charged.get(key) != pod.key:
                    if not node:  # it may go only where the claim can be allocated now
                        d.unplaced.add(key)
                        wanted[pin] = 1
                    continue  # a shared claim's devices are counted once, on one of its pods
            for r in requests:
                problem = _request_problem(r, c)
                if problem:
                    d.problems.setdefault(pod.key, []).append(problem)
                    continue
                kind = kind_of(r, d.kinds)
                d.kinds[kind] = c.classes[r.class_name] + r.selectors
                d.owners.setdefault(kind, set()).add(pod.namespace)
                wanted[kind] = wanted.get(kind, 0) + r.count
                if key is not None:
                    d.charged.setdefault(key, set()).add(kind)
                    claim_units = d.units.setdefault(key, {})
                    claim_units[kind] = claim_units.get(kind, 0) + r.count
        d.requests[pod.key] = wanted
    return d


def _request_problem(r: Request, c: Catalog) -> str:
    if r.class_name not in c.classes:
        return f"DeviceClass {r.class_name} (request {r.name}) not found"
    if r.mode != "ExactCount":
        return f"request {r.name}: allocationMode {r.mode} is not counted by Troupe (ask for a count)"
    for expression in c.classes[r.class_name] + r.selectors:
        try:
            cel.check(expression)
        except cel.SelectorError as e:
            return f"request {r.name}: {e}"
    return ""


def node_units(devices: Iterable[Device], kinds: Mapping[str, tuple[str, ...]],
               taken: Mapping[DeviceKey, frozenset[str]], owners: Mapping[str, Iterable[str]] | None = None,
               budget: int = SELECTOR_BUDGET) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Node -> resource -> the devices matching each kind's selectors that no claim holds,
    and resource -> why it cannot be counted (a selector that fails on some device, or the
    budget). ``taken``: the devices allocated to claims, each with the kinds its claim is
    asked as by a pod of the snapshot: such a device still counts for those kinds (that
    pod uses the units, and evicting it frees them, which preemption reads), for no other.

    ``owners``: resource -> the namespaces whose pods ask for it; each namespace may spend
    ``budget`` units (:func:`~reconciler.engine.model.cel.cost` of each evaluation, at least
    :data:`EVALUATION_FLOOR`; answers the memo holds are free) on its kinds, taken in name
    order, each charged to the namespace of its owners with the most left. A kind whose
    evaluations would take more than its owners have left is not counted now (its reason
    says so: only its gangs wait), and the next decision goes on from the memo."""
    out: dict[str, dict[str, int]] = {}
    broken: dict[str, str] = {}
    devices = list(devices)
    left: dict[str, int] = {}
    for kind, selectors in sorted(kinds.items()):
        payers = sorted(set(owners.get(kind, ())) if owners is not None else {""})
        payer = max(payers, key=lambda n: (left.setdefault(n, budget), n)) if payers else ""
        counted: dict[str, int] = {}
        answers: dict[tuple[str, cel.DeviceView], bool] = {}  # this kind's, by what each selector reads
        for device in devices:
            held = taken.get(device.key)
            if held is not None and kind not in held:
                continue
            try:
                ok = True
                for s in selectors:
                    seen = (s, cel.project(s, device.view))
                    answer = answers.get(seen)
                    if answer is None:
                        answer = cel.known(s, seen[1])
                        if answer is None:
                            price = max(cel.cost(s), EVALUATION_FLOOR)
                            if left.get(payer, budget) < price:
                                raise _OverBudget
                            left[payer] = left.get(payer, budget) - price
                            answer = cel.evaluate(s, seen[1])[0]
                        answers[seen] = answer
                    ok = answer
                    if not ok:
                        break
            except cel.SelectorError as e:
                broken[kind] = f"{e} (device {device.driver}/{device.pool}/{device.name})"
                break
            except _OverBudget:
                broken[kind] = (f"{kind}: its selectors over {len(devices)} devices take more than the "
                                f"{budget} units of evaluation namespace {payer or '-'} may spend on one decision; "
                                "counted over the next decisions (answers are kept)")
                break
            if ok:
                counted[device.node] = counted.get(device.node, 0) + 1
        if kind not in broken:
            for node, units in counted.items():
                out.setdefault(node, {})[kind] = units
    return out, broken


class _OverBudget(Exception):
    """A kind's owners have no budget left for its next evaluation (:func:`node_units`)."""


def _topology_labels(nodes: Sequence[NodeInfo], c: Catalog, levels: Sequence[str]) -> list[NodeInfo]:
    """``nodes`` with a label for each of ``levels`` that a node does not carry and on which
    all its devices agree (an NVLink domain a driver publishes per device): the attribute
    as a topology level, so gangs are placed inside it as inside a block."""
    values: dict[str, dict[str, set[str]]] = {}
    for device in c.devices:
        attrs = dict(device.view[1])
        per_node = values.setdefault(device.node, {})
        for level in levels:
            per_node.setdefault(level, set()).add(str(attrs.get(level, "")))
    out = []
    for n in nodes:
        found = {level: next(iter(v)) for level, v in values.get(n.name, {}).items()
                 if len(v) == 1 and "" not in v and level not in n.labels}
        out.append(dataclasses.replace(n, labels={**n.labels, **found}) if found else n)
    return out


class NodesMemo:
    """The node side of the last :func:`apply` (the nodes with their device units and
    device-attribute labels), kept for the next call on the same nodes (the same sequence
    object), the same catalog (the same object) and the same demand (the device kinds asked
    for, the devices taken, the namespaces asking, the pinned claims): the case of every
    snapshot a cache builds while only pods without claims, or no DRA object, changed.
    Counting walks every device of the cluster; with the memo, a snapshot pays it only when
    what it depends on changed (issue 37). A count that left a kind uncounted (over its
    evaluation budget, or a selector that fails) is not kept: the next call counts again,
    as it would without the memo. ``derived`` keeps one value made of the last node side
    (the snapshot builder's node table). Threads may share one: each entry is one tuple,
    read and replaced whole, and a value is used only for the very inputs it was made of."""

    __slots__ = ("_derived", "_entry")

    def __init__(self) -> None:
        self._entry: tuple[Sequence[NodeInfo], Catalog, object, list[NodeInfo]] | None = None
        self._derived: tuple[list[NodeInfo], Any] | None = None

    def nodes(self, nodes: Sequence[NodeInfo], c: Catalog, key: object,
              make: Callable[[], tuple[list[NodeInfo], dict[str, str]]]) -> tuple[list[NodeInfo], dict[str, str]]:
        """``make()`` (the counted nodes, and why kinds were not counted), or the nodes
        kept for the same inputs (with no such reason)."""
        entry = self._entry
        if entry is not None and entry[0] is nodes and entry[1] is c and entry[2] == key:
            return entry[3], {}
        counted, broken = make()
        self._entry = (nodes, c, key, counted) if not broken else None
        return counted, broken

    def derived(self, nodes: list[NodeInfo], make: Callable[[], T]) -> T:
        """``make()``, or the value made last for this very list of counted nodes."""
        kept = self._derived
        if kept is not None and kept[0] is nodes:
            value: T = kept[1]
            return value
        value = make()
        self._derived = (nodes, value)
        return value


def apply(nodes: Sequence[NodeInfo], pods: Sequence[PodInfo], c: Catalog,
          levels: Sequence[str] = (), memo: NodesMemo | None = None) -> tuple[list[NodeInfo], list[PodInfo]]:
    """``nodes`` and ``pods`` with DRA counted as units (module docstring): nodes offer the
    free matching devices of each requested kind and the claim resources of allocated
    claims; pods request them; a pod whose claims cannot be counted gets the reason in
    ``malformed`` (its gang is held). ``levels``: topology level keys that may be device
    attributes (:func:`level_attributes`): a node gets each as a label where its devices
    agree on it. Unchanged when no pod has a claim and no level is an attribute. ``memo``:
    where the node side is kept for the next call (:class:`NodesMemo`); the result is the
    same with it or without."""
    attribute_levels = level_attributes(c, levels) if levels else ()
    if not any(p.claims for p in pods):
        if not attribute_levels:
            return list(nodes), list(pods)
        labelled = (memo.nodes(nodes, c, (attribute_levels,), lambda: (_topology_labels(nodes, c, attribute_levels), {}))
                    if memo is not None else (_topology_labels(nodes, c, attribute_levels), {}))[0]
        return labelled, list(pods)
    d = _demand(pods, c)
    taken = {device: frozenset(d.charged.get((claim_.namespace, claim_.name), ()))
             for claim_ in c.claims.values() for device in claim_.allocated}

    def node_side() -> tuple[list[NodeInfo], dict[str, str]]:
        labelled = _topology_labels(nodes, c, attribute_levels) if attribute_levels else nodes
        units, broken = node_units(c.devices, d.kinds, taken, d.owners)
        for pin, node in d.pins.items():
            units.setdefault(node, {})[pin] = MAX_CONSUMERS
        for claim_key in sorted(d.unplaced):  # the nodes with the free devices to allocate it now
            wanted_units = d.units.get(claim_key, {})
            for offered in units.values() if wanted_units else ():
                if all(offered.get(kind, 0) >= count for kind, count in wanted_units.items()):
                    offered[f"{CLAIM}{claim_key[0]}/{claim_key[1]}"] = MAX_CONSUMERS
        return [dataclasses.replace(n, allocatable={**n.allocatable, **units[n.name]}) if n.name in units else n
                for n in labelled], broken

    if memo is None:
        new_nodes, broken = node_side()
    else:
        key = (attribute_levels, frozenset(d.kinds.items()), frozenset(taken.items()),
               frozenset((kind, frozenset(namespaces)) for kind, namespaces in d.owners.items()),
               frozenset(d.pins.items()), frozenset(d.unplaced),
               frozenset((claim, frozenset(units.items())) for claim, units in d.units.items()))
        new_nodes, broken = memo.nodes(nodes, c, key, node_side)
    new_pods = []
    for p in pods:
        wanted = d.requests.get(p.key)
        problems = d.problems.get(p.key, []) + [broken[k] for k in (wanted or {}) if k in broken]
        if wanted is None and not problems:
            new_pods.append(p)
            continue
        malformed = "; ".join([p.malformed, *problems]) if p.malformed else "; ".join(problems)
        new_pods.append(dataclasses.replace(p, requests={**p.requests, **(wanted or {})}, malformed=malformed))
    return new_nodes, new_pods


def convert_slots(slots: tuple[PodInfo, ...], c: Catalog) -> tuple[PodInfo, ...]:
    """The slots of a workload (its members before their pods exist,
    :mod:`reconciler.engine.model.templates`) with their claims counted as :func:`apply` counts a pod's: a
    template's requests per slot, a shared claim once."""
    if not any(s.claims for s in slots):
        return slots
    return tuple(apply((), slots, c)[1])
