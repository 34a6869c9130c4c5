"""What declares a pod's gang at its creation, as the webhook reads it from the pod alone
(the rules of :mod:`webhook.admission`): Troupe's keys (the user's, or stamped by the
namespace opt-in or Kueue's plain-pod rule), a pod group the pod names, or, for a pod
adopted from Volcano or KAI that names neither, the group that peer's own controller would
make for it (:mod:`troupe.adoption`, docs/decisions/065-adopted-pods-join-their-peers-groups.md).

In that order: Troupe's keys name the gang whatever else the pod says (a group the pod
names still binds the plan, docs/decisions/056-pod-groups.md); a group the pod names is its
gang otherwise (docs/decisions/057-adopted-scheduler-names.md); a peer's implicit group
only when the pod names neither, since only then would that peer have made one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from troupe import kueue
from troupe.adoption import ALONE, Verdict, at_creation, peer_source
from troupe.config import Config
from troupe.contract import TOPOLOGY_KEYS, GangKeys, pod_gates, pod_labels
from troupe.errors import ContractError
from troupe.podgroups import PodGroupRef, every_group_ref
from webhook.patches import PatchOp, auto_size, kueue_gang
from webhook.podgroups import adoption_ops, kube_schedulers


class Declared(NamedTuple):
    """What declares a pod's gang at creation, as :func:`read_declaration` found it: the
    pod and its annotations with any gang keys the webhook stamps, the ops that stamp them,
    the Troupe keys it carries, whether its Kueue topology annotations are read, the pod
    groups it names (empty when Kueue places it), the ops that adopt it from a second
    scheduler (``adopt_ops``, empty when it is not adopted), and ``peer``: what the group
    its peer would make asks of it (:class:`troupe.adoption.Verdict`: gate it, or refuse
    to adopt it, with the warning saying why)."""

    pod: Mapping[str, Any]
    ann: Mapping[str, Any]
    ops: list[PatchOp]
    troupe_keys: list[str]
    asks_kueue: bool
    groups: tuple[PodGroupRef, ...]
    adopt_ops: list[PatchOp]
    peer: Verdict


def read_declaration(pod: Mapping[str, Any], ann: Mapping[str, Any], config: Config, gang_mode_auto: bool,
                     keys: tuple[str, ...]) -> Declared | str:
    """The pod's gang declaration (:class:`Declared`; ``keys``: Troupe's annotation keys under
    ``config``), or the message of the denial (400) of
    a pod Kueue and Troupe would both place. A pod naming a pod group: the group is its gang
    unless Troupe's keys name one, so neither the namespace opt-in nor Kueue's plain-pod rule
    stamps a gang on it; a group pod bound for a scheduler that is not adopted is that
    scheduler's (no groups). A pod adopted from a grouping peer (:data:`troupe.adoption.
    GROUPING_PEERS`) that names no gang and no group gets its peer's verdict; one refused
    is not adopted (no ``adopt_ops``)."""
    ops: list[PatchOp] = []
    groups = every_group_ref(pod) if kube_schedulers(pod.get("spec"), config) else ()
    if gang_mode_auto and not groups:
        pod, ann, ops = auto_size(pod, ann, config)
    troupe_keys = sorted(k for k in keys if k in ann)
    asks_kueue = kueue.asks(ann)
    if asks_kueue:
        managed = kueue.managed_by_kueue(ann, pod_labels(pod), pod_gates(pod))
        if managed and troupe_keys:
            asked = ", ".join(k for k in kueue.TOPOLOGY_KEYS if k in ann)
            return (f"annotation {asked}: Kueue manages this pod ({managed}) and its topology-aware scheduling "
                    f"places it, and Troupe's keys ({', '.join(troupe_keys)}) would place it too; keep one of them")
        if managed:
            asks_kueue, groups = False, ()  # Kueue's pod: Kueue places it, whatever group it names
        elif any(k in ann for k in TOPOLOGY_KEYS):
            asks_kueue = False  # Troupe's own topology keys win
        elif not groups:
            try:
                pod, ann, kueue_ops = kueue_gang(pod, ann, config)
            except ContractError as e:
                return str(e)
            ops.extend(kueue_ops)
    spec = pod.get("spec")
    adopt_ops = adoption_ops(spec, pod.get("metadata") or {}, config) if isinstance(spec, dict) else []
    peer = _peer(pod, ann, config, groups) if adopt_ops else ALONE
    return Declared(pod, ann, ops, troupe_keys, asks_kueue, groups, [] if peer.refused else adopt_ops, peer)


def _peer(pod: Mapping[str, Any], ann: Mapping[str, Any], config: Config, groups: tuple[PodGroupRef, ...]) -> Verdict:
    """The verdict of the group a grouping peer would make for ``pod`` (being adopted), or
    :data:`~troupe.adoption.ALONE` when it names a group or a gang of Troupe's keys (those
    declare its gang), when Kueue manages it, or when its scheduler is not a grouping peer."""
    gang = GangKeys.for_prefix(config.gang_annotation_prefix)
    spec = pod.get("spec")
    source = peer_source(spec.get("schedulerName") if isinstance(spec, Mapping) else None)
    if source is None or groups or gang.name in ann or gang.size in ann \
            or kueue.managed_by_kueue(ann, pod_labels(pod), pod_gates(pod)):
        return ALONE
    return at_creation(source, pod)
