"""What a filter plugin is to the profile, as kube-scheduler's framework has it
(``pkg/scheduler/framework/interface.go``; Kubernetes docs "Scheduling Framework"):

- what it says of one node for one pod: a typed :class:`Status` (``Status{code, reasons,
  plugin}``). A passing filter returns None (kube-scheduler's nil status is Success); only
  failures are objects, and the plugins keep a constant per fixed reason, so the hot loops
  allocate nothing. Strings are rendered from statuses only where a message is written
  (:mod:`.profile` lists reasons in the profile's order);
- for a plugin that reads the pods around a member (or the member itself beyond its node
  filter), its :class:`PreFilterState` for one gang: built by its PreFilter from a
  :class:`Cycle`, told of each member placed and unplaced (``AddPod``/``RemovePod``), and
  asked by its Filter; the loop that runs them is :class:`~reconciler.engine.filters.gang.GangFilters`;
- what it registers with the profile: :class:`Registered`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NewType, Self, TypeVar

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.selectors import NodeFilter
from reconciler.engine.model.volumes import VolumeCatalog

T = TypeVar("T")

Plugin = NewType("Plugin", str)
"""A filter plugin's name, as kube-scheduler's profile names it (``NodeResourcesFit``)."""


class Code(StrEnum):
    """kube-scheduler's status codes, for a node (a filter's :class:`Status`) and for a
    gang (a placement's outcome)."""

    #: It fits: the caller places the pod there (the gang: every member has a node).
    SUCCESS = "Success"
    #: Not now: freeing room (pods finishing, preemption) may help, so a caller counts the
    #: node as a preemption candidate.
    UNSCHEDULABLE = "Unschedulable"
    #: Not here, whatever is freed (a taint, the node's labels, a missing volume): a caller
    #: leaves the node out of preemption. For a gang: no allowed domain holds it even empty,
    #: or the request is unknown.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class Status:
    """One plugin's failure on one node: its ``code``, the ``plugin`` that gave it, and its
    ``reasons`` worded as the plugin's ``ErrReason`` constants (several only for
    ``NodeResourcesFit``, one per resource short, in :func:`~reconciler.engine.model.resources.resource_order`)."""

    code: Code
    plugin: Plugin
    reasons: tuple[str, ...]


Order = Callable[[str], tuple[int, str]]
"""A plugin's own order of its reasons: a sort key for one reason text."""

NodeCheck = Callable[[NodeFilter, NodeInfo], "Status | None"]
"""A filter that reads only the node and the pod's node filter: None when it passes."""


class Cycle:
    """What the plugins' PreFilter reads for the placement of one gang (kube-scheduler's
    ``CycleState``, for a gang rather than a pod): the ``snapshot``, the gang's members in
    ``order`` (rank order; a member is its position in it), and the pods using nodes
    (:attr:`existing`), listed once for every plugin that counts them."""

    __slots__ = ("_existing", "order", "snapshot")

    def __init__(self, snapshot: Snapshot, order: Sequence[PodInfo]) -> None:
        self.snapshot, self.order = snapshot, order
        self._existing: list[tuple[PodInfo, int]] | None = None

    @property
    def existing(self) -> list[tuple[PodInfo, int]]:
        """Every pod using a node in the snapshot with that node's index, in the snapshot's
        order of pods (listed at the first call)."""
        if self._existing is None:
            index_of = self.snapshot.node_index_of
            self._existing = [(pod, i) for pod in self.snapshot.pods.values()
                              if (i := index_of(pod.key)) is not None]
        return self._existing


class PreFilterState:
    """One plugin's state for the placement of one gang: kube-scheduler's pre-filter state
    (``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``: ``preFilterState``,
    made by ``PreFilter``, kept by ``AddPod``/``RemovePod`` through ``updateWithPod`` with a
    multiplier of 1 or -1). It holds what its filter reads of the pods around a member,
    counted from the pods using nodes when it is made and changed by each member placed
    (:meth:`add_pod`) or taken back (:meth:`remove_pod`), so a check is a few lookups, never
    a pass over pods. Members are positions in :attr:`Cycle.order`, nodes indexes of the
    snapshot's nodes.

    A plugin module registers its subclass (:attr:`Registered.state`); the gang's loop
    (:class:`~reconciler.engine.filters.gang.GangFilters`) makes the states the gang needs
    and runs them in the profile's order. Only :meth:`prefilter` and :meth:`filter` must be
    given; every other hook says the plugin has nothing to add."""

    __slots__ = ()

    @classmethod
    def wanted(cls, snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
        """Whether this plugin can refuse a node to ``members`` though none of them has pod
        terms (:class:`~reconciler.engine.model.podterms.PodTerms`): a node name, the
        cluster's default constraints, a running pod's anti-affinity. The loop is made only
        for a gang that has pod terms or that a plugin wants, so most gangs pay nothing."""
        return False

    @classmethod
    def prefilter(cls, cycle: Cycle) -> Self | None:
        """PreFilter: the state for the gang of ``cycle``, the pods using nodes counted; None
        when the plugin can refuse no node to any member (kube-scheduler's ``Skip``)."""
        raise NotImplementedError

    def filter(self, m: int, i: int) -> Status | None:
        """Filter: None when member ``m`` passes on node ``i``, the members placed so far
        counted; else the plugin's status."""
        raise NotImplementedError

    def add_pod(self, m: int, i: int) -> None:
        """AddPod: member ``m`` is placed on node ``i``; every later check counts it."""

    def remove_pod(self, m: int, i: int) -> None:
        """RemovePod: member ``m``, placed on node ``i``, is taken back (the inverse of
        :meth:`add_pod`)."""

    def filter_unplaced(self, m: int, i: int) -> Status | None:
        """:meth:`filter` before any member is placed, for the nodes a member's shape may
        use: a rule that members of the gang may satisfy among themselves is taken as
        satisfiable (the member-by-member fill checks it as they are placed)."""
        return self.filter(m, i)

    def one_per_node(self, m: int) -> bool:
        """Whether two members like ``m`` never share a node."""
        return False

    def together_keys(self, m: int) -> tuple[str, ...]:
        """The node label keys whose one domain must hold every member like ``m``."""
        return ()

    def placed_last(self, m: int) -> bool:
        """Whether member ``m`` is placed after the members for which this is False (it
        depends on them)."""
        return False

    def signature(self, m: int) -> tuple[object, ...]:
        """What :meth:`filter_unplaced` reads of member ``m`` besides its pod terms, node
        name and namespace: members of equal signatures pass on the same nodes."""
        return ()


class MemberClaimChecks(PreFilterState):
    """The state of a plugin that counts no pods and checks the claims a member mounts
    (``VolumeBinding``, ``VolumeZone``): made only when the snapshot has a volume catalog
    and a member mounts a claim, it keeps each member's result per node, since several
    fills ask again. A subclass gives :meth:`check`."""

    __slots__ = ("catalog", "known", "order", "snapshot")

    def __init__(self, catalog: VolumeCatalog, snapshot: Snapshot, order: list[PodInfo]) -> None:
        self.catalog, self.snapshot, self.order = catalog, snapshot, order
        self.known: dict[tuple[int, int], Status | None] = {}

    @classmethod
    def prefilter(cls, cycle: Cycle) -> Self | None:
        """None without a volume catalog or when no member mounts a claim."""
        volumes = cycle.snapshot.volumes
        if volumes is None or not any(m.terms is not None and m.terms.claims for m in cycle.order):
            return None
        return cls(volumes, cycle.snapshot, list(cycle.order))

    def filter(self, m: int, i: int) -> Status | None:
        """:meth:`check` of member ``m``'s claims on node ``i``, worked out once."""
        pod = self.order[m]
        if pod.terms is None or not pod.terms.claims:
            return None
        key = (m, i)
        if key not in self.known:
            self.known[key] = self.check(pod.namespace, pod.terms.claims, self.snapshot.nodes[i])
        return self.known[key]

    def check(self, namespace: str, claims: Sequence[str], node: NodeInfo) -> Status | None:
        """The plugin's verdict on claims ``claims`` (names in ``namespace``) on ``node``."""
        raise NotImplementedError


def tally(items: list[T], values: Sequence[T], sign: int) -> None:
    """Add ``values`` to ``items`` (``sign`` 1) or remove one of each (-1): what a state
    keeps per node of what the pods there hold (host ports, attached volumes)."""
    for value in values:
        if sign > 0:
            items.append(value)
        else:
            items.remove(value)


@dataclass(frozen=True)
class Registered:
    """What a plugin module registers with the profile (:data:`~reconciler.engine.filters.profile.PROFILE`):
    its ``plugin`` name, its fixed ``reasons`` in the plugin's own order, its ``source``
    (the plugin's path in kube-scheduler), for a plugin whose reasons carry a value (a
    taint, a resource, a claim) the ``order`` of those, for a plugin that reads only the
    node and the pod's node filter, its ``node`` check (run by
    :func:`~reconciler.engine.filters.profile.node_status` in profile order), and for one
    that reads more of the member or the pods around it, its ``state``
    (:class:`PreFilterState`, run by :class:`~reconciler.engine.filters.gang.GangFilters`
    in profile order)."""

    plugin: Plugin
    reasons: tuple[str, ...]
    source: str
    order: Order | None = None
    node: NodeCheck | None = None
    state: type[PreFilterState] | None = None

    def rank(self, reason: str) -> tuple[int, str]:
        """``reason``'s place among this plugin's: its ``order``, else its position in
        ``reasons`` (one not listed goes last, by its text)."""
        if self.order is not None:
            return self.order(reason)
        try:
            return (self.reasons.index(reason), "")
        except ValueError:
            return (len(self.reasons), reason)
