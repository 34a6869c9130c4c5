"""The topology map's data: one JSON object the page draws, made the same way by the
reconciler (from its cache and its decisions) and by ``kubectl troupe topology --web``
(from a snapshot or a live read and the plugin's decisions).

Pure: a topology tree (:func:`reconciler.engine.ledger.occupancy.occupancy`), gang rows and node
marks in, plain JSON values out (docs/decisions/042-topology-map.md):

- :func:`page`: the object ``/topology/data.json`` serves;
- :func:`node_marks`: which nodes a snapshot holds for a gang that has not started there
  yet (``reserved``: a release in progress or a reservation of a gang released as created;
  ``nominated``: a preemptor's nomination);
- :func:`node_room`: what pods outside any gang take of each node, from their requests
  against its allocatable, DaemonSet and static pods aside (docs/decisions/053-map-at-scale.md);
- :func:`held_marks` and :func:`held_row`: the nodes held for waiting gangs (a head-of-line
  hold, a ``Backfill`` reservation: docs/decisions/079-reservation-at-earliest-start-and-backfill.md)
  and how the rows of those gangs say it;
- :func:`gang_of`: pod key -> gang key, the holders the tree names;
- :func:`visible`: the page as a caller who sees only some namespaces reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from reconciler.engine.gangs.queueing import Hold
from reconciler.engine.ledger.occupancy import DomainUsage
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.resources import PODS
from reconciler.engine.model.timestamps import rfc3339
from reconciler.tools.render import topology_json
from troupe.config import Config

#: The page data's format; a change that removes or renames a field bumps it.
VERSION = 1
#: Phases of a gang that runs or is being released: every other phase waits.
NOT_WAITING = frozenset({"Placed", "Releasing", "Released"})
#: The kinds of node marks: :func:`node_marks`'s and :func:`held_marks`'s.
MARKS = ("reserved", "nominated", "held")
#: Controlling owners whose pods belong to the node itself: a DaemonSet runs one on every
#: node it selects, and a static pod's mirror is owned by its Node
#: (https://kubernetes.io/docs/tasks/configure-pod-container/static-pod/). They never make
#: a node look used.
NODE_OWNERS = frozenset({"DaemonSet", "Node"})
#: The share of a node's allocatable cpu, memory or any other resource but ``pods`` from
#: which the requests of pods outside any gang make the node look used. Any unit of an
#: extended resource (a name with a domain: ``nvidia.com/gpu``) does at once.
OTHER_SHARE = 0.1


def gang_of(snapshot: Snapshot, config: Config) -> dict[str, str]:
    """Pod key (``namespace/name``) -> the key of the gang it belongs to, for every pod of
    ``snapshot`` Troupe manages (what :func:`reconciler.engine.ledger.occupancy.occupancy` reads)."""
    return {p.key: key for key, pods in group_by_gang(snapshot.pods.values(), config).items() for p in pods}


def node_marks(snapshot: Snapshot, gangs: Mapping[PodKey, str]) -> dict[str, dict[str, list[str]]]:
    """Node name -> mark (``reserved``, ``nominated``) -> the sorted gang keys it holds the
    node for: gated members the reconciler committed to it (pinned, or named by the plan
    record of a release in progress), gated members a preemptor's nomination holds it for,
    and the free ranks of a reservation (docs/decisions/034-release-as-created.md).
    ``gangs``: pod key -> gang key (:func:`gang_of`). Cost: one pass over the pods."""
    found: dict[str, dict[str, set[str]]] = {}
    for key, pod in snapshot.pods.items():
        if not pod.gated or not pod.active or (gang := gangs.get(key)) is None:
            continue
        node, mark = snapshot.committed_node(pod), "reserved"
        if not node:
            node, mark = snapshot.nominated_node(pod), "nominated"
        if node:
            found.setdefault(node, {}).setdefault(mark, set()).add(gang)
    for gang, reservation in snapshot.reservations.items():
        for rank in range(len(reservation.record.nodes)):
            node = snapshot.using(reservation.holding(rank)) or ""
            if node:
                found.setdefault(node, {}).setdefault("reserved", set()).add(gang)
    return {node: {mark: sorted(keys) for mark, keys in marks.items()} for node, marks in found.items()}


def held_marks(holds: Iterable[Hold]) -> dict[str, dict[str, list[str]]]:
    """Node name -> ``{"held": sorted gang keys}``: the nodes each hold of ``holds`` takes
    for its gang (a head-of-line hold, docs/decisions/019-queue-order.md, or a ``Backfill``
    reservation, docs/decisions/079-reservation-at-earliest-start-and-backfill.md), named
    from the node table the hold was decided on (:meth:`Hold.node_names`), so a map on a
    snapshot with other nodes never shows a wrong one (a node gone since is not in its
    tree; a hold without a table shows none). Cost: one step per held node."""
    found: dict[str, set[str]] = {}
    for hold in holds:
        for name in hold.node_names():
            found.setdefault(name, set()).add(hold.gang)
    return {name: {"held": sorted(keys)} for name, keys in found.items()}


def with_marks(*marks: Mapping[str, Mapping[str, Sequence[str]]]) -> dict[str, dict[str, Sequence[str]]]:
    """The node marks of ``marks`` (each node name -> mark -> gang keys) in one mapping;
    a later mapping's list of a mark replaces an earlier one's (the kinds do not overlap)."""
    out: dict[str, dict[str, Sequence[str]]] = {}
    for each in marks:
        for name, kinds in each.items():
            out.setdefault(name, {}).update(kinds)
    return out


def held_row(hold: Hold) -> dict[str, Any]:
    """The fields a gang row carries for the capacity held for it: ``held``
    (``{"domain": "<level>=<value>", "nodes": count, "reservation": bool}``) and, for a
    reservation, ``expectedStart`` (RFC 3339; None while no known limit says when) and
    ``reserved`` (its domain), the names of the simulator's JSON
    (:meth:`reconciler.tools.simulate.GangOutcome.to_json`)."""
    row: dict[str, Any] = {"held": {"domain": hold.domain, "nodes": len(hold.nodes), "reservation": hold.reservation}}
    if hold.reservation:
        row["expectedStart"] = rfc3339(hold.start) if hold.start is not None else None
        row["reserved"] = hold.domain
    return row


def node_room(snapshot: Snapshot, gangs: Mapping[PodKey, str]) -> dict[str, dict[str, Any]]:
    """Node name -> what the pods on it outside any gang (``gangs``: pod key -> gang key,
    :func:`gang_of`) take of it, for the nodes that have such pods (the pods a node's
    resources go to: :meth:`~reconciler.engine.ledger.snapshot.Snapshot.using`):

    - ``nodePods``: how many belong to the node itself (controlled by a :data:`NODE_OWNERS`
      kind: DaemonSet pods, static pods); they are left out of what follows;
    - ``otherShare``: resource -> the share of the node's allocatable (0 to 1, 3 decimals,
      more when overcommitted) that the other pods request, for every resource the node
      offers and they request, ``pods`` aside;
    - ``otherUse``: whether they take a meaningful share: any unit of an extended resource
      (a name with a ``/``) or at least :data:`OTHER_SHARE` of any other resource.

    Requests are kube-scheduler's (:func:`~reconciler.engine.model.resources.pod_requests`).
    Cost: one pass over the pods."""
    own: dict[int, int] = {}
    taken: dict[int, dict[str, int]] = {}
    for key, pod in snapshot.pods.items():
        i = snapshot.node_index_of(key)
        if i is None or key in gangs:
            continue
        if pod.owner is not None and pod.owner.kind in NODE_OWNERS:
            own[i] = own.get(i, 0) + 1
            continue
        sums = taken.setdefault(i, {})
        for resource, units in pod.requests.items():
            if resource != PODS and units > 0:
                sums[resource] = sums.get(resource, 0) + units
    out: dict[str, dict[str, Any]] = {}
    for i in own.keys() | taken.keys():
        node = snapshot.nodes[i]
        share = {r: round(units / node.allocatable[r], 3) for r, units in sorted(taken.get(i, {}).items())
                 if node.allocatable.get(r, 0) > 0}
        use = any(("/" in r and units > 0) or units >= OTHER_SHARE * max(node.allocatable.get(r, 0), 1)
                  for r, units in taken.get(i, {}).items())
        out[node.name] = {"nodePods": own.get(i, 0), "otherShare": share, "otherUse": use}
    return out


def _marked(tree: dict[str, Any], marks: Mapping[str, Mapping[str, Sequence[str]]],
            room: Mapping[str, Mapping[str, Any]]) -> None:
    """Add each node's marks and room to the nodes of ``tree`` (a :func:`topology_json`
    object), in place; a node without pods outside any gang gets ``otherUse`` false."""
    for child in tree.get("children", ()):
        _marked(child, marks, room)
    for node in tree.get("nodes", ()):
        for mark, gangs in marks.get(node["name"], {}).items():
            node[mark] = list(gangs)
        found = room.get(node["name"])
        node["otherUse"] = bool(found and found["otherUse"])
        if found:
            node["nodePods"], node["otherShare"] = found["nodePods"], dict(found["otherShare"])


def _count(tree: DomainUsage) -> int:
    return len(tree.nodes) + sum(_count(c) for c in tree.children)


def page(tree: DomainUsage, gangs: Iterable[Mapping[str, Any]], marks: Mapping[str, Mapping[str, Sequence[str]]],
         room: Mapping[str, Mapping[str, Any]], *, resource: str, levels: Sequence[str], source: str, at: float, refresh_seconds: float) -> dict[str, Any]:
    """The page's JSON object (field by field in docs/contract.md, "Topology map"):

    - ``version`` (:data:`VERSION`), ``source`` (where it was read: ``reconciler``, a
      snapshot file, a cluster), ``at`` (RFC 3339: when it was decided, ``at`` seconds
      since the epoch), ``refreshSeconds`` (how often the page reads it again; 0: never),
      ``resource`` whose units are counted, ``levels`` (node label keys, highest first);
    - ``tree``: ``kubectl troupe topology -o json``'s tree (:func:`topology_json`), each
      node with its ``reserved``, ``nominated`` and ``held`` gang keys when it has any
      (``marks``, :func:`node_marks` and :func:`held_marks`), ``otherUse`` and, when it has
      pods outside any gang, ``nodePods`` and ``otherShare`` (``room``, :func:`node_room`);
    - ``gangs``: one row per gang, as given (each with at least ``gang``, its key, and
      ``phase`` and ``reason``, ``nodes``, the nodes its plan or reservation names, when it
      has such, and :func:`held_row`'s fields when capacity is held for it), each with
      ``waiting`` (its phase is not Placed, Releasing
      or Released); waiting gangs first (by ``queuePosition`` when rows carry it), then by key;
    - ``summary``: ``nodes``, ``allocatable`` and ``free`` units, ``gangs`` and ``waiting``.
    """
    rows = [{**row, "waiting": row.get("phase") not in NOT_WAITING} for row in gangs]
    rows.sort(key=lambda r: (not r["waiting"], r.get("queuePosition") or 1 << 30, str(r.get("gang"))))
    data = topology_json(tree)
    _marked(data, marks, room)
    return {
        "version": VERSION, "source": source, "at": rfc3339(at), "refreshSeconds": refresh_seconds,
        "resource": resource, "levels": list(levels),
        "summary": {"nodes": _count(tree), "allocatable": tree.allocatable, "free": tree.free, "gangs": len(rows),
                    "waiting": sum(1 for r in rows if r["waiting"])},
        "gangs": rows, "tree": data,
    }


def _namespace(gang: str) -> str:
    return gang.partition("/")[0]


def visible(data: Mapping[str, Any], sees: Callable[[str], bool]) -> dict[str, Any]:
    """The page data ``data`` (:func:`page`) as a caller who sees only the namespaces
    ``sees`` says yes to reads it (docs/decisions/049-hostile-tenants-third-round.md): the
    rows of other namespaces' gangs left out, their holders on a node counted among its
    ``otherPods`` (its units stay counted in ``free``; one that uses any unit makes the node's
    ``otherUse`` true), their marks left out, the summary
    counted again, and ``visibleNamespaces`` (sorted) naming the namespaces shown. ``sees``
    is asked once per namespace."""
    memo: dict[str, bool] = {}

    def shown(gang: str) -> bool:
        namespace = _namespace(gang)
        if namespace not in memo:
            memo[namespace] = sees(namespace)
        return memo[namespace]

    def tree(d: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(d)
        if "children" in d:
            out["children"] = [tree(c) for c in d["children"]]
        if "nodes" in d:
            out["nodes"] = [node(n) for n in d["nodes"]]
        return out

    def node(n: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(n)
        holders = [h for h in n.get("holders", ()) if shown(h["gang"])]
        out["holders"] = holders
        hidden = [h for h in n.get("holders", ()) if not shown(h["gang"])]
        out["otherPods"] = n.get("otherPods", 0) + sum(h["pods"] for h in hidden)
        out["otherUse"] = bool(n.get("otherUse")) or any(h["units"] > 0 for h in hidden)
        for mark in MARKS:
            if mark in n:
                kept = [g for g in n[mark] if shown(g)]
                if kept:
                    out[mark] = kept
                else:
                    del out[mark]
        return out

    rows = [r for r in data.get("gangs", ()) if shown(str(r.get("gang")))]
    out = {**data, "tree": tree(data.get("tree", {})), "gangs": rows}
    out["summary"] = {**data.get("summary", {}), "gangs": len(rows), "waiting": sum(1 for r in rows if r.get("waiting"))}
    out["visibleNamespaces"] = sorted(ns for ns, yes in memo.items() if yes)
    out.pop("mapDigest", None)
    return out
