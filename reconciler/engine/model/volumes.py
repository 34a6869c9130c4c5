"""The volume objects kube-scheduler's volume filters read, and those filters.

A :class:`VolumeCatalog` holds what Troupe reads of PersistentVolumeClaims,
PersistentVolumes and CSINodes; :meth:`VolumeCatalog.claim_reason` and
:meth:`VolumeCatalog.node_reason` are the filters that depend on those objects alone, with
kube-scheduler's reasons:

- ``VolumeRestrictions``: a ``ReadWriteOncePod`` claim used by another pod keeps the pod off
  every node (docs "Persistent Volumes", access modes);
- ``NodeVolumeLimits``: the CSI volumes attached to a node, per driver, stay within the
  count its CSINode allows (``spec.drivers[].allocatable.count``; docs "Node-specific
  Volume Limits");
- ``VolumeBinding``: a bound volume's required node affinity matches the node; a claim
  that does not exist, or is bound to a volume that does not exist, fits nowhere;
- ``VolumeZone``: a bound volume's zone and region labels match the node's (docs
  "Running in multiple zones").

An unbound claim (``WaitForFirstConsumer``, or waiting for a provisioner) is not modeled:
whether a volume can be provisioned or matched for a node is the provisioner's answer
(:meth:`VolumeCatalog.unmodeled`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, sequence, string, string_map
from reconciler.engine.model.selectors import Term, parse_node_terms

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
#: The PersistentVolume labels ``VolumeZone`` compares with the node's.
ZONE_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
               "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region")

RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
MAX_VOLUMES = "node(s) exceed max volume count"
VOLUME_AFFINITY = "node(s) had volume node affinity conflict"
MISSING_VOLUME = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
VOLUME_ZONE = "node(s) had no available volume zone"


@dataclass(frozen=True)
class ClaimInfo:
    """A PersistentVolumeClaim: ``volume`` is ``spec.volumeName`` (``""``: unbound)."""

    namespace: str
    name: str
    volume: str = ""
    access_modes: tuple[str, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ClaimInfo:
        """A PersistentVolumeClaim object; raises :class:`ObjectError`."""
        meta, spec = mapping(obj, "metadata", required=True), mapping(obj, "spec")
        modes = sequence(spec, "accessModes", "spec")
        return cls(string(meta, "namespace", "metadata", default="default"),
                   string(meta, "name", "metadata", required=True), string(spec, "volumeName", "spec"),
                   tuple(m for m in modes if isinstance(m, str)))


@dataclass(frozen=True)
class VolumeInfo:
    """A PersistentVolume: its required node affinity (None: any node), its zone labels
    (:data:`ZONE_LABELS`, a value may list zones joined by ``__``), its CSI driver and
    volume handle (``""`` when not CSI)."""

    name: str
    terms: tuple[Term, ...] | None = None
    zones: Mapping[str, frozenset[str]] = field(default_factory=dict)
    driver: str = ""
    handle: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> VolumeInfo:
        """A PersistentVolume object; raises :class:`ObjectError`."""
        meta, spec = mapping(obj, "metadata", required=True), mapping(obj, "spec")
        labels = string_map(meta, "labels", "metadata")
        required = mapping(mapping(spec, "nodeAffinity", "spec"), "required", "spec.nodeAffinity")
        try:
            terms = parse_node_terms(required) if required else None
        except ObjectError as e:
            raise e.below("spec.nodeAffinity.required") from None
        csi = mapping(spec, "csi", "spec")
        return cls(string(meta, "name", "metadata", required=True), terms,
                   {key: frozenset(labels[key].split("__")) for key in ZONE_LABELS if key in labels},
                   string(csi, "driver", "spec.csi"), string(csi, "volumeHandle", "spec.csi"))


@dataclass(frozen=True)
class CSINodeInfo:
    """A CSINode: per driver, how many volumes may be attached (drivers without a count
    have no limit)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> CSINodeInfo:
        """A CSINode object; raises :class:`ObjectError`."""
        meta, spec = mapping(obj, "metadata", required=True), mapping(obj, "spec")
        limits = {}
        for driver in sequence(spec, "drivers", "spec"):
            if not isinstance(driver, Mapping):
                continue
            count = mapping(driver, "allocatable").get("count")
            if isinstance(count, int) and not isinstance(count, bool) and isinstance(driver.get("name"), str):
                limits[driver["name"]] = count
        return cls(string(meta, "name", "metadata", required=True), limits)


class VolumeCatalog:
    """Claims by ``(namespace, name)``, volumes and CSINodes by name (module docstring)."""

    def __init__(self, claims: Iterable[ClaimInfo] = (), volumes: Iterable[VolumeInfo] = (),
                 csinodes: Iterable[CSINodeInfo] = ()) -> None:
        self.claims = {(c.namespace, c.name): c for c in claims}
        self.volumes = {v.name: v for v in volumes}
        self.csinodes = {c.name: c for c in csinodes}

    def unmodeled(self, namespace: str, claims: Iterable[str]) -> tuple[str, ...]:
        """Phrases for the claims whose placement the engine cannot judge: unbound ones
        (provisioning or matching a volume is the provisioner's)."""
        return tuple(f"unbound PersistentVolumeClaim {name} (volume provisioning)" for name in claims
                     if (found := self.claims.get((namespace, name))) is not None and not found.volume)

    def claim_reason(self, namespace: str, claims: Iterable[str]) -> str | None:
        """Why no node takes a pod mounting ``claims``, before any node is looked at
        (``VolumeBinding``'s PreFilter): ``persistentvolumeclaim "x" not found``."""
        for name in claims:
            if (namespace, name) not in self.claims:
                return f'persistentvolumeclaim "{name}" not found'
        return None

    def attached(self, namespace: str, claims: Iterable[str]) -> list[tuple[str, str]]:
        """The ``(driver, handle)`` of the bound CSI volumes of ``claims``."""
        out = []
        for name in claims:
            claim = self.claims.get((namespace, name))
            volume = self.volumes.get(claim.volume) if claim is not None and claim.volume else None
            if volume is not None and volume.driver:
                out.append((volume.driver, volume.handle))
        return out

    def node_reason(self, namespace: str, claims: Iterable[str], node: str, labels: Mapping[str, str]) -> str | None:
        """``VolumeBinding`` then ``VolumeZone`` for one node: the first failing reason."""
        volumes = []
        for name in claims:
            claim = self.claims.get((namespace, name))
            if claim is None or not claim.volume:
                continue
            volume = self.volumes.get(claim.volume)
            if volume is None:
                return MISSING_VOLUME
            if volume.terms is not None and not any(t.matches(labels, node) for t in volume.terms):
                return VOLUME_AFFINITY
            volumes.append(volume)
        if any(key in labels for key in ZONE_LABELS):
            for volume in volumes:
                if any(labels.get(key) not in zones for key, zones in volume.zones.items()):
                    return VOLUME_ZONE
        return None

    def exceeds(self, node: str, attached: Iterable[tuple[str, str]], adding: Iterable[tuple[str, str]]) -> bool:
        """``NodeVolumeLimits``: whether attaching ``adding`` to a node that has
        ``attached`` goes over a driver's count in its CSINode."""
        limits = self.csinodes.get(node)
        if limits is None or not limits.limits:
            return False
        have = set(attached)
        new = {v for v in adding if v not in have}
        for driver, count in limits.limits.items():
            if sum(1 for d, _ in new if d == driver) and sum(1 for d, _ in have | new if d == driver) > count:
                return True
        return False

    def read_write_once_pod(self, namespace: str, claims: Iterable[str]) -> set[tuple[str, str]]:
        """The ``(namespace, name)`` of ``claims`` that are ``ReadWriteOncePod``."""
        return {(namespace, name) for name in claims
                if (found := self.claims.get((namespace, name))) is not None
                and READ_WRITE_ONCE_POD in found.access_modes}


def namespace_labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """A Namespace's ``metadata.labels`` (label -> value; empty when absent): what pod
    affinity's ``namespaceSelector`` matches. Raises :class:`ObjectError` naming the field
    when it is malformed."""
    return string_map(mapping(obj, "metadata", required=True), "labels", "metadata")


#: The kinds whose objects make the :class:`VolumeCatalog`, in its constructor's order.
VOLUME_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "CSINode")
#: Per kind (as ``kind`` names it in an object): the parser of one object, shared by the
#: reconciler's cache and the parser of object lists (:mod:`reconciler.engine.ledger.parts`).
PARSERS: Mapping[str, Callable[[Mapping[str, Any]], Any]] = {
    "PersistentVolumeClaim": ClaimInfo.from_object,
    "PersistentVolume": VolumeInfo.from_object,
    "CSINode": CSINodeInfo.from_object,
    "Namespace": namespace_labels,
}
