"""``helm upgrade`` carries the SharedDeviceGroup CRD, on the real kube-apiserver.

Chart 0.1.0 (``tests/e2e/charts/troupe-0.1.0.tgz``, packaged from the repository as it was
before decision 036) shipped the CRD in ``crds/``, which Helm installs once and never
upgrades. The chart now renders it as a template: the upgrade from 0.1.0 adopts the CRD
(``--take-ownership``, which the install guide names), a later change to the CRD reaches the
cluster with a plain ``helm upgrade``, and ``helm uninstall`` keeps the CRD and its objects.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.devcluster import Cluster
from tests.support.e2e import admission_policies_settled, wait_for
from tests.support.helm import CHART, HelmFailed, helm
from troupe import contract

PREVIOUS_CHART = Path(__file__).resolve().parent / "charts" / "troupe-0.1.0.tgz"
RELEASE = "troupe-upgrade"
CRD = "shareddevicegroups.deviceshare.io"
GROUP = {"apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
         "metadata": {"name": "kept-through-upgrades"}, "spec": {"resources": {"nvidia.com/gpu": 2}}}
#: The change a later chart version makes to the CRD in this test: one more printer column.
STRATEGY_COLUMN = {"name": "Strategy", "type": "string", "jsonPath": ".spec.schedulingStrategy"}


@pytest.fixture
def crd_as_the_cluster_had_it(cluster: Cluster) -> Iterator[None]:
    """Afterwards the CRD is again the one the local control plane installs at start (no Helm
    ownership, no test column), and the uninstalled release's admission policies are out of
    effect (the API server drops a deleted policy from its cache a moment later): the test
    modules that run after this one on the cluster write Gang objects as the admin."""
    yield
    cluster.install_crds()
    group, version, plural = contract.GANG_API
    gang = {"apiVersion": f"{group}/{version}", "kind": "Gang", "metadata": {"name": "policy-probe",
                                                                          "namespace": "default"}}
    objects = client.CustomObjectsApi(cluster.api_client("admin"))

    def admitted() -> bool:
        try:
            objects.create_namespaced_custom_object(group, version, "default", plural, gang, dry_run="All")
        except client.ApiException as e:
            if e.status == 403:
                return False
            raise
        return True
    wait_for("the uninstalled release's policies out of effect", admitted, timeout=60)


def crd(api: Any) -> Any:
    return client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD)


def columns(api: Any) -> list[str]:
    [version] = crd(api).spec.versions
    return [c.name for c in version.additional_printer_columns]


def chart_with_a_changed_crd(directory: Path) -> Path:
    """A copy of the chart whose CRD has :data:`STRATEGY_COLUMN` as well."""
    chart = directory / "troupe"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / "shareddevicegroups.yaml"
    changed = yaml.safe_load(path.read_text())
    changed["spec"]["versions"][0]["additionalPrinterColumns"].insert(3, STRATEGY_COLUMN)
    path.write_text(yaml.safe_dump(changed, sort_keys=False))
    return chart


def test_helm_upgrade_from_0_1_0_adopts_the_crd_and_a_later_upgrade_carries_its_change(
    cluster: Cluster, namespace: str, tmp_path: Path, crd_as_the_cluster_had_it: None
) -> None:
    api = cluster.api_client("admin")
    objects = client.CustomObjectsApi(api)
    admin = str(cluster.kubeconfig("admin"))

    def run(*args: str) -> str:
        return helm(*args, "--namespace", namespace, "--kubeconfig", admin, binary=cluster.binaries.helm)

    # The cluster as chart 0.1.0 leaves it: the CRD of its crds/, owned by no release.
    with tarfile.open(PREVIOUS_CHART) as packaged:
        packaged.extractall(tmp_path / "previous", filter="data")
    cluster.install_crds(tmp_path / "previous" / "troupe" / "crds")
    run("install", RELEASE, str(PREVIOUS_CHART))
    try:
        objects.create_cluster_custom_object("deviceshare.io", "v1alpha1", "shareddevicegroups", GROUP)
        assert "helm.sh/resource-policy" not in (crd(api).metadata.annotations or {})

        with pytest.raises(HelmFailed, match="invalid ownership metadata"):
            run("upgrade", RELEASE, str(CHART))
        run("upgrade", RELEASE, str(CHART), "--take-ownership")

        adopted = crd(api).metadata
        assert adopted.annotations["helm.sh/resource-policy"] == "keep"
        assert adopted.annotations["meta.helm.sh/release-name"] == RELEASE
        assert adopted.labels["app.kubernetes.io/managed-by"] == "Helm"
        assert "Strategy" not in columns(api)

        run("upgrade", RELEASE, str(chart_with_a_changed_crd(tmp_path / "next")))

        assert columns(api) == ["Phase", "Node", "Devices", "Strategy", "Age"]
        assert objects.get_cluster_custom_object("deviceshare.io", "v1alpha1", "shareddevicegroups",
                                                 GROUP["metadata"]["name"])
    finally:
        run("uninstall", RELEASE)
        admission_policies_settled(api)  # the next module on this cluster is judged without them

    assert crd(api).metadata.annotations["helm.sh/resource-policy"] == "keep", "uninstall keeps the CRD"
    kept = objects.get_cluster_custom_object("deviceshare.io", "v1alpha1", "shareddevicegroups", GROUP["metadata"]["name"])
    assert kept["spec"]["resources"] == {"nvidia.com/gpu": 2}
    objects.delete_cluster_custom_object("deviceshare.io", "v1alpha1", "shareddevicegroups", GROUP["metadata"]["name"])
