"""The cache keeps what the volume filters and namespace selectors read: claims, volumes,
CSINodes and namespaces' labels, cut down as they arrive, in every snapshot it builds; and
the pods' fields the other filters read survive the cut."""

from __future__ import annotations

import copy

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model.volumes import ClaimInfo, CSINodeInfo, VolumeInfo
from reconciler.engine.placement.place import place_gang
from reconciler.objects.retain import CLAIM, CSI_NODE, NAMESPACE, VOLUME, retain
from testbed.engine_builders import claim_object, csinode_object, volume_object
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config, from_mapping

MANAGED = [{"manager": "kcm", "operation": "Update", "fieldsV1": {"f:spec": {}}}]


def bulky(obj: dict) -> dict:
    """``obj`` with what the API server adds and no reader wants."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = MANAGED
    obj["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    obj.setdefault("status", {})["phase"] = "Bound"
    return obj


def test_retained_claims_volumes_and_csinodes_parse_as_the_whole_ones() -> None:
    claim = bulky(claim_object("data", "pv-1", ["ReadWriteOncePod"]))
    claim["spec"]["resources"] = {"requests": {"storage": "1Ti"}}
    volume = bulky(volume_object("pv-1", hostname="n1", zone="a", driver="pd.csi", handle="disk-1"))
    volume["spec"]["capacity"] = {"storage": "1Ti"}
    csinode = bulky(csinode_object("n1", "pd.csi", 16))
    csinode["spec"]["drivers"][0]["topologyKeys"] = ["zone"]
    assert ClaimInfo.from_object(retain(CLAIM, claim)) == ClaimInfo.from_object(claim)
    assert VolumeInfo.from_object(retain(VOLUME, volume)) == VolumeInfo.from_object(volume)
    assert CSINodeInfo.from_object(retain(CSI_NODE, csinode)) == CSINodeInfo.from_object(csinode)
    kept = retain(NAMESPACE, bulky({"metadata": {"name": "ml", "labels": {"team": "x"}}}))
    assert kept["metadata"] == {"name": "ml", "labels": {"team": "x"}}
    assert "managedFields" not in retain(VOLUME, volume)["metadata"] and "capacity" not in retain(VOLUME, volume)["spec"]


def test_the_snapshot_holds_claims_volumes_csinodes_and_namespaces_and_follows_their_events() -> None:
    cache = ClusterCache(Config())
    index = cache.volumes
    index.replace("persistentvolumeclaims", [index.retain("persistentvolumeclaims", bulky(claim_object("data", "pv-1",
                                                                                                         namespace="ml")))])
    index.replace("persistentvolumes", [index.retain("persistentvolumes", bulky(volume_object("pv-1", hostname="n2")))])
    index.replace("csinodes", [bulky(csinode_object("n1", "pd.csi", 4))])
    index.replace("namespaces", [{"metadata": {"name": "ml", "labels": {"team": "x"}}}])
    cache.replace_nodes([make_node(f"n{i}").gpus(8).build() for i in (1, 2)])
    member = make_pod("w-0", "ml").gang("g", 1).gpus(1).gated().build()
    member["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    cache.replace_pods([cache.retain_pod(member)])

    snapshot = cache.snapshot()
    assert snapshot.namespaces == {"ml": {"team": "x"}}
    assert snapshot.volumes.csinodes["n1"].limits == {"pd.csi": 4}
    result = place_gang(snapshot, cache.members("ml/g"))
    assert result.nodes() == {"ml/w-0": "n2"}, "the bound volume's node affinity"

    index.event("persistentvolumes", "MODIFIED", volume_object("pv-1", hostname="n1"))
    assert place_gang(cache.snapshot(), cache.members("ml/g")).nodes() == {"ml/w-0": "n1"}
    index.event("persistentvolumeclaims", "DELETED", claim_object("data", namespace="ml"))
    refused = place_gang(cache.snapshot(), cache.members("ml/g"))
    assert not refused.placed and 'persistentvolumeclaim "data" not found' in refused.reason


def test_the_configured_default_spread_constraints_reach_the_snapshot() -> None:
    config = from_mapping({"topologySpreadDefaultConstraints": [
        {"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"},
        {"topologyKey": "kubernetes.io/hostname", "maxSkew": 3, "whenUnsatisfiable": "ScheduleAnyway"}]})
    cache = ClusterCache(config)
    (only,) = cache.snapshot().spread_defaults
    assert (only.topology_key, only.max_skew, only.selector) == ("topology.kubernetes.io/zone", 1, None)
