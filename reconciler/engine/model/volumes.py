"""The volume objects kube-scheduler's volume filters read: what Troupe reads of
PersistentVolumeClaims, PersistentVolumes and CSINodes, in a :class:`VolumeCatalog` with
the lookups those filters make. The filters themselves, with kube-scheduler's reasons, are
plugin modules of :mod:`reconciler.engine.filters`: ``volumerestrictions``
(``ReadWriteOncePod``), ``nodevolumelimits`` (CSINode counts), ``volumebinding`` (bound
volumes exist and their node affinity matches), ``volumezone`` (zone labels).

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
    """Claims by ``(namespace, name)``, volumes and CSINodes by name, and the lookups the
    volume filters make of them (module docstring)."""

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

    def attached(self, namespace: str, claims: Iterable[str]) -> list[tuple[str, str]]:
        """The ``(driver, handle)`` of the bound CSI volumes of ``claims``."""
        out = []
        for name in claims:
            claim = self.claims.get((namespace, name))
            volume = self.volumes.get(claim.volume) if claim is not None and claim.volume else None
            if volume is not None and volume.driver:
                out.append((volume.driver, volume.handle))
        return out

    def bound(self, namespace: str, claims: Iterable[str]) -> list[tuple[str, VolumeInfo | None]]:
        """For each of ``claims`` that exists and is bound: its volume's name and the
        volume (None when no such volume exists)."""
        out = []
        for name in claims:
            claim = self.claims.get((namespace, name))
            if claim is not None and claim.volume:
                out.append((claim.volume, self.volumes.get(claim.volume)))
        return out

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
