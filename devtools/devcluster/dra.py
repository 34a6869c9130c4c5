"""Fake Dynamic Resource Allocation (DRA) devices on kwok nodes, published as a real driver's
kubelet plugin would: one ``resource.k8s.io/v1`` ResourceSlice per node, and a DeviceClass
per driver. No plugin runs: kwok plays the kubelet, so a pod whose claims kube-scheduler
allocated is started (marked Running) like any other.

The ResourceSlice of node ``<node>`` for driver ``<driver>`` (:func:`resource_slice`)::

    metadata: {name: <node>-<driver>, ownerReferences: [the Node]}   # goes with its Node
    spec:
      driver: <driver>
      nodeName: <node>
      pool: {name: <node>, generation: 1, resourceSliceCount: 1}
      devices:
      - name: gpu-0                                   # gpu-0 .. gpu-<count-1>
        attributes:
          index: {int: 0}                             # unqualified: in the driver's domain
          uuid: {string: GPU-<uuid5 of driver/node/index>}
          nvlinkDomain: {string: <node>}              # NVLink/NVSwitch domain: the host
          resource.kubernetes.io/pcieRoot: {string: pci0000:10}   # one root per pair
          resource.kubernetes.io/pciBusID: {string: "0000:11:00.0"}
          resource.kubernetes.io/numaNode: {int: 0}   # first half 0, second half 1
          <the group's attributes, e.g. model: {string: H100-SXM5-80GB}>
        capacity: {<name>: {value: <quantity>}}       # the group's capacity, e.g. memory: 80Gi

The ``resource.kubernetes.io/`` names are Kubernetes' standard device attributes, so a
claim can align devices with ``constraints: [{matchAttribute: resource.kubernetes.io/pcieRoot}]``;
CEL reads the others as ``device.attributes["<driver>"].model``. The DeviceClass named
``<driver>`` (:func:`device_class`) selects every device of the driver
(``device.driver == "<driver>"``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from devtools.devcluster.nodes import FakeDevices

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
#: Kubernetes' standard device attributes (kubernetes.io, "Standard Device Attributes for
#: Dynamic Resource Allocation").
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
NUMA_NODE = "resource.kubernetes.io/numaNode"
#: The driver-domain attribute naming the NVLink/NVSwitch domain of a device: its host.
NVLINK_DOMAIN = "nvlinkDomain"
#: Devices under one PCIe root complex.
DEVICES_PER_PCIE_ROOT = 2


def slice_name(node: str, driver: str) -> str:
    """The name of node ``node``'s ResourceSlice of ``driver``: ``<node>-<driver>``."""
    return f"{node}-{driver}"


def device_attributes(node: str, devices: FakeDevices, index: int) -> dict[str, dict[str, Any]]:
    """The attributes of device ``index`` (0-based) of ``node``: index, uuid, NVLink domain,
    PCIe root (one per :data:`DEVICES_PER_PCIE_ROOT` devices), PCI bus id, NUMA node (two
    halves), then the group's own attributes, which win on a clash."""
    root_bus = 0x10 * (index // DEVICES_PER_PCIE_ROOT + 1)
    return {
        "index": {"int": index},
        "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{index}.{node}.{devices.driver}')}"},
        NVLINK_DOMAIN: {"string": node},
        PCIE_ROOT: {"string": f"pci0000:{root_bus:02x}"},
        PCI_BUS_ID: {"string": f"0000:{root_bus + 1 + index % DEVICES_PER_PCIE_ROOT:02x}:00.0"},
        NUMA_NODE: {"int": index * 2 // devices.count},
        **{name: dict(value) for name, value in devices.attributes.items()},
    }


def resource_slice(node: str, devices: FakeDevices, node_uid: str | None = None) -> dict[str, Any]:
    """The ResourceSlice of ``node`` (shape in the module docstring); with ``node_uid``, owned
    by the Node, so that the garbage collector deletes it with the Node."""
    metadata: dict[str, Any] = {"name": slice_name(node, devices.driver)}
    if node_uid is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": devices.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": device_attributes(node, devices, index),
                    "capacity": {name: {"value": value} for name, value in devices.capacity.items()},
                }
                for index in range(devices.count)
            ],
        },
    }


def device_class(driver: str) -> dict[str, Any]:
    """The DeviceClass ``<driver>``: every device of ``driver``, selected by CEL."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def publish(api_client: Any, devices: Mapping[str, FakeDevices]) -> list[str]:
    """Create (or replace) the DeviceClass of every driver of ``devices`` and the ResourceSlice
    of every node of it (node name -> its devices; the Nodes must exist: each slice is owned
    by its Node). Returns the slice names, in the order of ``devices``.

    ``api_client``: a ``kubernetes.client.ApiClient`` allowed to write both kinds. Raises
    ``kubernetes.client.ApiException`` on a refusal (a 422 names the invalid field) and when
    a Node is missing (404).
    """
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(api_client)
    custom = k8s.CustomObjectsApi(api_client)
    for driver in dict.fromkeys(d.driver for d in devices.values()):
        _apply(custom, "deviceclasses", device_class(driver))
    names = []
    for node, node_devices in devices.items():
        metadata = core.read_node(node).metadata
        body = resource_slice(node, node_devices, metadata.uid if metadata else None)
        _apply(custom, "resourceslices", body)
        names.append(body["metadata"]["name"])
    return names


def unpublish(api_client: Any, devices: Mapping[str, FakeDevices], device_classes: bool = False) -> None:
    """Delete the ResourceSlices of ``devices`` (node name -> its devices), and with
    ``device_classes`` the DeviceClasses of their drivers; those already gone are skipped.
    Raises ``kubernetes.client.ApiException`` on any other error."""
    from kubernetes import client as k8s

    custom = k8s.CustomObjectsApi(api_client)
    doomed = [("resourceslices", slice_name(node, d.driver)) for node, d in devices.items()]
    if device_classes:
        doomed += [("deviceclasses", driver) for driver in dict.fromkeys(d.driver for d in devices.values())]
    for plural, name in doomed:
        _delete(custom, plural, name)


def published_slices(api_client: Any, nodes: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The ResourceSlices on the server (as dicts), those of ``nodes`` only when given."""
    from kubernetes import client as k8s

    listed: Any = k8s.CustomObjectsApi(api_client).list_cluster_custom_object(GROUP, VERSION, "resourceslices")
    items: list[dict[str, Any]] = listed["items"]
    if nodes is None:
        return items
    wanted = set(nodes)
    return [item for item in items if item["spec"].get("nodeName") in wanted]


def _apply(custom: Any, plural: str, body: dict[str, Any]) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
    except ApiException as err:
        if err.status != 409:
            raise
        name = body["metadata"]["name"]
        current = custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        if plural == "resourceslices":  # a pool that changes gets a new generation
            pool = {**body["spec"]["pool"], "generation": current["spec"]["pool"]["generation"] + 1}
            body["spec"] = {**body["spec"], "pool": pool}
        custom.replace_cluster_custom_object(GROUP, VERSION, plural, name, body)


def _delete(custom: Any, plural: str, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
    except ApiException as err:
        if err.status != 404:
            raise
