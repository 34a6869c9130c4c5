"""Fake DRA devices of a nodes file (``draDevices``) and the ResourceSlices and DeviceClass
published for them (devtools/devcluster/dra.py), without a cluster."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from devtools.devcluster import dra, nodes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_dra_example_has_16_topology_nodes_with_8_dra_gpus_each_and_no_gpu_extended_resource():
    got = nodes.load_file(EXAMPLES / "dra-nodes.yaml")

    assert len(got.nodes) == 16
    assert Counter(n["metadata"]["labels"][nodes.SUBBLOCK_LABEL] for n in got.nodes) == {
        "dra-b0-s0": 4, "dra-b0-s1": 4, "dra-b1-s0": 4, "dra-b1-s1": 4}
    assert all("nvidia.com/gpu" not in n["status"]["allocatable"] for n in got.nodes)
    assert set(got.devices) == {n["metadata"]["name"] for n in got.nodes}
    devices = got.devices["dra-b1-s1-h3"]
    assert (devices.driver, devices.count, devices.capacity) == ("gpu.troupe.dev", 8, {"memory": "80Gi"})
    assert devices.attributes == {"model": {"string": "H100-SXM5-80GB"}, "architecture": {"string": "Hopper"},
                                  "driverVersion": {"version": "580.65.6"}}


def test_a_group_without_dra_devices_has_none_and_keeps_its_extended_resource():
    got = nodes.load_file(EXAMPLES / "nodes.yaml")

    assert got.devices == {}
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in got.nodes)
    assert nodes.load(EXAMPLES / "nodes.yaml") == got.nodes


def test_only_the_nodes_of_the_group_with_dra_devices_get_them():
    got = nodes.read_documents([{"kind": "FakeNodes", "groups": [
        {"name": "plain", "count": 1},
        {"name": "dra", "count": 2, "draDevices": {"count": 4, "attributes": {"cores": 132, "mig": False}}},
    ]}])

    assert [n["metadata"]["name"] for n in got.nodes] == ["plain-0", "dra-0", "dra-1"]
    assert set(got.devices) == {"dra-0", "dra-1"}
    assert got.devices["dra-0"] == nodes.FakeDevices("gpu.troupe.dev", 4, {"cores": {"int": 132}, "mig": {"bool": False}})


@pytest.mark.parametrize(("section", "message"), [
    ({"count": 0}, "groups[0].draDevices.count must be a positive integer"),
    ({"count": 129}, "groups[0].draDevices.count must be at most 128"),
    ({"count": 8, "driver": "GPU.example"}, "groups[0].draDevices.driver must be a lower-case DNS subdomain"),
    ({"count": 8, "devices": 8}, "groups[0].draDevices has unknown keys ['devices']"),
    ({"count": 8, "attributes": {"model": ["a"]}}, "groups[0].draDevices.attributes.model must be a string"),
    ({"count": 8, "attributes": {"v": {"semver": "1.0.0"}}}, "groups[0].draDevices.attributes.v must be"),
    ({"count": 8, "capacity": ["80Gi"]}, "groups[0].draDevices.capacity must be a mapping"),
    ("eight", "groups[0].draDevices must be a mapping"),
])
def test_a_bad_dra_devices_section_is_refused_naming_the_field(section, message):
    with pytest.raises(nodes.NodesFileError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        nodes.expand({"groups": [{"name": "g", "count": 1, "draDevices": section}]})


def test_a_slice_lists_the_devices_of_one_node_in_a_pool_of_its_own_owned_by_the_node():
    devices = nodes.FakeDevices("gpu.troupe.dev", 8, {"model": {"string": "H100"}}, {"memory": "80Gi"})

    got = dra.resource_slice("dra-b0-s0-h1", devices, node_uid="uid-1")

    assert got["apiVersion"] == "resource.k8s.io/v1" and got["kind"] == "ResourceSlice"
    assert got["metadata"] == {"name": "dra-b0-s0-h1-gpu.troupe.dev", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "dra-b0-s0-h1", "uid": "uid-1"}]}
    spec = got["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.troupe.dev", "dra-b0-s0-h1")
    assert spec["pool"] == {"name": "dra-b0-s0-h1", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert all(d["capacity"] == {"memory": {"value": "80Gi"}} for d in spec["devices"])
    attributes = [d["attributes"] for d in spec["devices"]]
    assert [a["index"] for a in attributes] == [{"int": i} for i in range(8)]
    assert all(a["model"] == {"string": "H100"} for a in attributes)
    assert len({a["uuid"]["string"] for a in attributes}) == 8


def test_devices_describe_their_topology_nvlink_per_host_pcie_root_per_pair_numa_per_half():
    attributes = [d["attributes"] for d in
                  dra.resource_slice("h1", nodes.FakeDevices("gpu.troupe.dev", 8))["spec"]["devices"]]

    assert {a[dra.NVLINK_DOMAIN]["string"] for a in attributes} == {"h1"}
    roots = [a[dra.PCIE_ROOT]["string"] for a in attributes]
    assert roots == ["pci0000:10", "pci0000:10", "pci0000:20", "pci0000:20",
                     "pci0000:30", "pci0000:30", "pci0000:40", "pci0000:40"]
    assert len({a[dra.PCI_BUS_ID]["string"] for a in attributes}) == 8
    assert [a[dra.NUMA_NODE]["int"] for a in attributes] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_same_device_of_another_node_has_another_uuid():
    devices = nodes.FakeDevices("gpu.troupe.dev", 1)

    assert dra.device_attributes("a", devices, 0)["uuid"] != dra.device_attributes("b", devices, 0)["uuid"]


def test_the_device_class_selects_the_driver_by_cel():
    assert dra.device_class("gpu.troupe.dev") == {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.troupe.dev"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.troupe.dev"'}}]}}
