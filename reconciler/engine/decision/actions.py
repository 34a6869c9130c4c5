"""What a decision asks to be done: a small closed set of typed actions.

:func:`reconciler.engine.decision.decide.decide` returns a :class:`~reconciler.engine.decision.seen.Decision`
whose ``actions`` are instances of the classes below, built by the lifecycle rule that
matched. Two interpreters carry them out, and neither branches on a phase or a rule name:
the reconciler writes them to the cluster (:mod:`reconciler.daemon.controller`), the
simulator applies them to its snapshot (:mod:`reconciler.tools.simulate`). Each
interpreter is a table from action type to handler, so a new kind of action that one of
them forgets fails its tests at once (``KeyError``), as a new state of h11's table would.

=====================  ===========================================================
action                 what it asks
=====================  ===========================================================
:class:`Wait`          the gated members wait; each carries the rule's condition
:class:`Hold`          the gated members are held (their input is wrong); likewise
:class:`Release`       pin each member to its node and remove its gates, in one write
:class:`RollBack`      delete the owned members of a timed-out or refused release
:class:`Preempt`       hold nodes with a nomination, then evict the victims
:class:`Reserve`       write a gang's reservation on its workload (release as created)
:class:`DropReservation` remove it: complete, rolled back, or no longer fitting
:class:`RecordNodeFailures` record members that failed on their nodes (failing nodes are avoided)
:class:`RequestCapacity` create the gang's ProvisioningRequest and its PodTemplates
:class:`DropCapacityRequest` delete them: bound, placed without it, or replaced
:class:`ClearNominations`, :class:`ClearPlans`, :class:`ForgetBackoff`: record clean-ups
=====================  ===========================================================

A :class:`Status` keeps the reason structured (kube-scheduler's ``framework.Status``: a
code that says whether preemption can help, and a list of reasons) until it is rendered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.engine.filters.status import Code
from reconciler.engine.gangs.avoidance import NodeFailure
from reconciler.engine.gangs.capacity import OwnerRef, PodSet
from reconciler.engine.gangs.refusals import Refusal
from reconciler.engine.model.devicegroups import Devices, Holding
from reconciler.engine.model.keys import PodKey, WorkloadKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Nomination, Plan
from reconciler.engine.model.reservations import Record
from reconciler.engine.preemption import PreemptionPlan
from troupe.contract import is_troupe_gate


@dataclass(frozen=True)
class Status:
    """Why a gang is where it is, kept structured until rendered.

    ``code``: the placement engine's code when it was asked (``Success``,
    ``Unschedulable``: preemption or freed capacity can help, ``UnschedulableAndUnresolvable``:
    they cannot), None when the rule decided without it. ``reasons``: the parts of the
    message, in order; ``subject``: what they are about, prefixed once
    (``"replacement member(s) w-3: "``). :meth:`message` renders them.
    """

    reasons: tuple[str, ...]
    code: Code | None = None
    subject: str = ""

    @classmethod
    def of(cls, reason: str, code: Code | None = None, subject: str = "") -> Status:
        """A status of one reason."""
        return cls((reason,) if reason else (), code, subject)

    def message(self) -> str:
        """The text users read: the subject, then the reasons joined by ``"; "``."""
        return self.subject + "; ".join(self.reasons)

    @property
    def preemption_can_help(self) -> bool:
        """True when evicting pods (or capacity freed otherwise) could make the gang fit."""
        return self.code is Code.UNSCHEDULABLE


@dataclass(frozen=True)
class MemberRelease:
    """One member to release in one write: pin it to ``node`` (the pin adds
    ``kubernetes.io/hostname: <hostname>`` to its node selection), stamp its ``rank``
    (0-based, in the whole gang) and the release's ``planned_at``, and remove its Troupe
    gates. ``pod`` is ``namespace/name``; ``uid`` and ``resource_version`` are those the
    decision saw (a write made against a newer version must check it is still the same
    pod, still unpinned or pinned to ``node``). ``devices``: the IDs of its
    SharedDeviceGroup, written in the same update (``deviceshare.io/selected-devices`` and
    ``deviceshare.io/env.<VAR>``); empty for a pod in no group. ``annotations``: others
    written in the same update: a member placed on the room of its gang's ProvisioningRequest
    consumes it (``autoscaling.x-k8s.io/consume-provisioning-request`` and
    ``autoscaling.x-k8s.io/provisioning-class-name``: :mod:`troupe.provisioning`)."""

    pod: PodKey
    uid: str
    resource_version: str
    node: str
    hostname: str
    rank: int
    planned_at: str
    devices: Devices = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def applied(self, pod: PodInfo, released_at: str, plan: Plan | None = None) -> PodInfo:
        """``pod`` (this member as the decision saw it) as its release's one update leaves it
        (:func:`reconciler.ports.pods.release_patch`): pinned to :attr:`node`,
        stamped with :attr:`planned_at` and ``released_at`` (RFC 3339), carrying ``plan``
        (the record of the first member of a release of several) and its devices, its
        nomination ended and Troupe's gates gone (other components' gates stay). What a
        pipeline of releases assumes of a member while its write is in flight
        (docs/decisions/068-release-pipeline.md); it counts on :attr:`node` in a snapshot as
        the written pod will."""
        return replace(pod, assigned_node=self.node, planned_at=self.planned_at, released_at=released_at,
                       plan=plan if plan is not None else pod.plan, nomination=None,
                       devices=self.devices if self.devices else pod.devices,
                       gates=tuple(g for g in pod.gates if not is_troupe_gate(g)))


@dataclass(frozen=True)
class Wait:
    """The gated ``members`` (pod keys, rank order) wait: each carries the rule's
    ``troupe.io/Gang`` condition with the decision's message, and the gang's Event goes on
    the first of them when its condition changes (docs/decisions/025-actions.md)."""

    members: tuple[PodKey, ...]


@dataclass(frozen=True)
class Hold(Wait):
    """The gated ``members`` are held: their own input is wrong (members that disagree, a
    SharedDeviceGroup that cannot take them). Like :class:`Wait`, but each member concerned
    gets the rule's Warning, once per message (``seeds/001``: each disagreeing member is told)."""


@dataclass(frozen=True)
class Release:
    """Release ``members`` (rank order), one update each (pin, annotations, gates removed).
    ``plan``: the record written on ``members[0]`` in its own update before any other
    member is written (a release of more than one member), so a release cut short is
    finished on the same nodes (docs/decisions/007-release-writes.md). ``bindings``: the
    SharedDeviceGroups this release binds to a node (their status follows the members).
    ``finishing``: True when the members were reserved by an earlier release cut short.
    ``note``: what each member's ``Released`` condition adds to its node and rank (what
    the plan did not model, the nodes it avoids; ``""``: nothing)."""

    members: tuple[MemberRelease, ...]
    plan: Plan | None = None
    bindings: tuple[Holding, ...] = ()
    finishing: bool = False
    note: str = ""


@dataclass(frozen=True)
class RollBack:
    """Roll back the timed-out ``releases`` (their ``planned-at``): mark each pod of
    ``delete`` ``DisruptionTarget`` and delete it (its controller recreates it, gated
    again); tell each pod of ``keep`` (no controller owns it: never deleted) with an
    Event. The caller remembers ``releases`` until their owned members are gone, so a
    rollback cut short is finished, and backs the gang off (docs/decisions/005-gang-timeout.md).
    ``avoid``: kube-scheduler's refusals that led to it (:mod:`reconciler.engine.gangs.refusals`): the caller
    records their nodes for the gang to avoid and does not back it off, for its next plan
    differs (docs/decisions/032-scheduler-refusals.md)."""

    delete: tuple[PodKey, ...]
    keep: tuple[PodKey, ...]
    releases: tuple[str, ...]
    avoid: tuple[Refusal, ...] = ()


@dataclass(frozen=True)
class Preempt:
    """Make room by eviction: write ``nomination`` on ``nominee`` (it holds the nodes for
    the gang from then on), then evict ``evict`` (pod keys, sorted) through the Eviction
    API. ``plan``: the planner's new plan (None while the gang awaits the victims of a
    nomination it already holds; then ``evict`` lists those not yet terminating)."""

    nominee: PodKey
    nomination: Nomination
    evict: tuple[PodKey, ...]
    plan: PreemptionPlan | None = None


@dataclass(frozen=True)
class ClearNominations:
    """Remove the nomination from ``pods`` (it ran out, or the gang is placed without it)."""

    pods: tuple[PodKey, ...]


@dataclass(frozen=True)
class ClearPlans:
    """Remove the plan record from ``pods`` (ownerless members of a rolled-back release)."""

    pods: tuple[PodKey, ...]


@dataclass(frozen=True)
class ForgetBackoff:
    """The gang runs whole: its consecutive-timeout count and backoff start afresh, and the
    recorded backoff is dropped from the reconciler's state."""


@dataclass(frozen=True)
class Reserve:
    """Write ``record`` on the workload ``workload`` (``(kind, namespace, name)``) as its
    ``reconciler.troupe.io/reservation``: from then on every rank's node holds that rank's
    requests (docs/decisions/034-release-as-created.md). The actions after it in the same
    decision are carried out only once it is written."""

    workload: WorkloadKey
    record: Record


@dataclass(frozen=True)
class DropReservation:
    """Remove the reservation planned at ``planned_at`` from the workload ``workload``
    (``(kind, namespace, name)``): every member is bound (``complete``), or the reservation
    was rolled back or no longer fits its workload; ``why`` says which."""

    workload: WorkloadKey
    planned_at: str
    why: str
    complete: bool = False


@dataclass(frozen=True)
class RecordNodeFailures:
    """Record ``failures`` (:class:`~reconciler.engine.gangs.avoidance.NodeFailure`: a member that
    failed on a node, or was lost with it) in each node's ``reconciler.troupe.io/failures``,
    so nodes that keep failing members are avoided (docs/decisions/041-failing-nodes.md)."""

    failures: tuple[NodeFailure, ...]


@dataclass(frozen=True)
class RequestCapacity:
    """Create the ProvisioningRequest ``name`` in ``namespace`` for gang ``gang``: one
    PodTemplate per entry of ``pod_sets`` (named by it, copied from its model member's spec,
    gates left out), then the request (``spec.provisioningClassName`` ``class_name``,
    ``spec.parameters`` ``parameters``, a ``podSets`` entry per template with its count),
    all owned by ``owner`` and annotated with ``attempt`` (1 for the gang's first).
    ``replaces``: the UID of the gang's request to delete first (it failed, expired, or its
    nodes did not fit), ``""``: none; ``replaced_templates``: that request's PodTemplates,
    deleted with it (docs/decisions/080-provisioning-requests.md)."""

    gang: str
    namespace: str
    name: str
    class_name: str
    parameters: Mapping[str, str]
    pod_sets: tuple[PodSet, ...]
    owner: OwnerRef
    attempt: int = 1
    replaces: str = ""
    replaced_templates: tuple[str, ...] = ()

    @property
    def pods(self) -> int:
        """How many pods it asks room for."""
        return sum(p.count for p in self.pod_sets)


@dataclass(frozen=True)
class DropCapacityRequest:
    """Delete the gang's ProvisioningRequest ``name`` in ``namespace`` if its UID is still
    ``uid``, and its PodTemplates ``templates``: the gang is bound, or was placed without
    it; ``why`` says which."""

    namespace: str
    name: str
    uid: str
    why: str
    templates: tuple[str, ...] = ()


#: The closed set of actions a decision may hold.
Action = (Wait | Hold | Release | RollBack | Preempt | ClearNominations | ClearPlans | ForgetBackoff | Reserve
          | DropReservation | RecordNodeFailures | RequestCapacity | DropCapacityRequest)
