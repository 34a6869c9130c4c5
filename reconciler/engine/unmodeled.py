"""What a pod asks of kube-scheduler that the engine does not model yet.

The engine models four of kube-scheduler's filters (:mod:`.filters`: ``NodeUnschedulable``
and readiness, ``TaintToleration``, ``NodeAffinity`` with ``spec.nodeSelector``,
``NodeResourcesFit``). Troupe pins each member to a node and kube-scheduler, the final
authority, runs every filter of its profile there; a member that uses what the engine does
not model may be refused on its node. The decision still places it, and says so
("placed without modeling: pod anti-affinity (kube-scheduler will check it)", in the
condition, the Event and ``kubectl troupe why``); a refusal is then read back from the pod
and the gang planned again off that node (:mod:`.refusals`, docs/decisions/032-scheduler-refusals.md).

Not modeled today, with the plugin of kube-scheduler's default profile that checks each
(Kubernetes docs "Scheduling Framework", "Scheduler Configuration"):

- required pod affinity and anti-affinity (``InterPodAffinity``);
- topology spread constraints with ``whenUnsatisfiable: DoNotSchedule`` (``PodTopologySpread``;
  ``ScheduleAnyway`` only scores);
- host ports (``NodePorts``);
- volumes other than ``emptyDir``, ``configMap``, ``secret``, ``projected`` and
  ``downwardAPI``, which no filter reads (``VolumeBinding``, ``VolumeZone``,
  ``VolumeRestrictions``, ``NodeVolumeLimits``);
- resource claims (``DynamicResources``).

Pure: :func:`scheduler_checks` reads a pod's spec once, when it is parsed
(:meth:`~reconciler.engine.cluster.PodInfo.from_object`); :func:`unmodeled` and
:func:`note` read the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

#: Volume sources no kube-scheduler filter reads (they need no node-side check).
NODE_FREE_VOLUMES = frozenset({"emptyDir", "configMap", "secret", "projected", "downwardAPI"})

POD_AFFINITY = "pod affinity"
POD_ANTI_AFFINITY = "pod anti-affinity"
TOPOLOGY_SPREAD = "topology spread constraints"
HOST_PORTS = "host ports"
RESOURCE_CLAIMS = "resource claims"


class HasChecks(Protocol):
    """A pod as :func:`unmodeled` reads it (:class:`~reconciler.engine.cluster.PodInfo`)."""

    @property
    def scheduler_checks(self) -> tuple[str, ...]:
        """What it asks of kube-scheduler beyond the engine's model (:func:`scheduler_checks`)."""


def _required_terms(affinity: Mapping[str, Any], kind: str) -> bool:
    section = affinity.get(kind)
    return isinstance(section, Mapping) and bool(section.get("requiredDuringSchedulingIgnoredDuringExecution"))


def _volume_kinds(volumes: Any) -> list[str]:
    """The source kinds of ``spec.volumes`` that a filter reads (``persistentVolumeClaim``...),
    sorted; a volume whose only key is its name (the cache keeps no more of the node-free
    kinds, :mod:`reconciler.objects.retain`) reads as node-free."""
    if not isinstance(volumes, list):
        return []
    kinds = {key for volume in volumes if isinstance(volume, Mapping)
             for key in volume if key != "name" and key not in NODE_FREE_VOLUMES}
    return sorted(kinds)


def _has_host_port(containers: Iterable[Any]) -> bool:
    for container in containers:
        ports = container.get("ports") if isinstance(container, Mapping) else None
        if isinstance(ports, list) and any(isinstance(p, Mapping) and p.get("hostPort") for p in ports):
            return True
    return False


def scheduler_checks(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Short phrases for what a pod's ``spec`` asks of kube-scheduler that the engine does
    not model (module docstring), in a fixed order: ``("pod anti-affinity", "host ports")``;
    ``()`` for most pods. Never raises: a malformed part reads as absent (the parser of
    the parts the engine models names malformed fields)."""
    out: list[str] = []
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        if _required_terms(affinity, "podAffinity"):
            out.append(POD_AFFINITY)
        if _required_terms(affinity, "podAntiAffinity"):
            out.append(POD_ANTI_AFFINITY)
    spread = spec.get("topologySpreadConstraints")
    if isinstance(spread, list) and any(isinstance(c, Mapping) and c.get("whenUnsatisfiable", "DoNotSchedule")
                                        == "DoNotSchedule" for c in spread):
        out.append(TOPOLOGY_SPREAD)
    containers = [c for key in ("initContainers", "containers") if isinstance(spec.get(key), list) for c in spec[key]]
    if _has_host_port(containers):
        out.append(HOST_PORTS)
    kinds = _volume_kinds(spec.get("volumes"))
    if kinds:
        out.append(f"{'volume' if len(kinds) == 1 else 'volumes'} {', '.join(kinds)}")
    if spec.get("resourceClaims"):
        out.append(RESOURCE_CLAIMS)
    return tuple(out)


def unmodeled(pod: HasChecks) -> tuple[str, ...]:
    """What ``pod`` uses that the engine does not model (short phrases, ``()``: nothing)."""
    return pod.scheduler_checks


def note(members: Sequence[HasChecks]) -> str:
    """The note a placement of ``members`` carries when some use what the engine does not
    model: ``placed without modeling: pod anti-affinity (kube-scheduler will check it)``;
    ``""`` when none does. Phrases in first-seen order, each once."""
    phrases = list(dict.fromkeys(phrase for pod in members for phrase in unmodeled(pod)))
    if not phrases:
        return ""
    them = "it" if len(phrases) == 1 else "them"
    return f"placed without modeling: {', '.join(phrases)} (kube-scheduler will check {them})"
