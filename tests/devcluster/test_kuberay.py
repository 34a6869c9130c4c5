"""KubeRay's operator in the cache (devtools/devcluster/kuberay.py) and its command line on
the local cluster (devtools/devcluster/rayoperator.py): where it is built, what its stamps
record, which CRDs come with it, and the flags of its ``main.go`` at v1.5.0."""

from __future__ import annotations

import pytest

from devtools.devcluster import kuberay, rayoperator
from devtools.devcluster.toolchain import Builder, BuildError


def test_the_operator_and_its_crds_are_stamped_artifacts_of_the_cache(tmp_path):
    paths = kuberay.kuberay_paths(tmp_path)
    assert paths.binary == tmp_path / "kuberay-v1.5.0" / "bin" / "ray-operator"
    assert paths.crds == tmp_path / "kuberay-v1.5.0" / "crds.yaml"
    assert dict(kuberay.versions(paths)) == {paths.binary: "v1.5.0", paths.crds: "v1.5.0"}
    assert kuberay.built_kuberay(tmp_path) is None
    paths.binary.parent.mkdir(parents=True)
    paths.binary.write_text("x")
    paths.binary.with_name("ray-operator.stamp").write_text("v1.5.0\n")
    assert kuberay.built_kuberay(tmp_path) is None, "the CRDs are part of the build"
    paths.crds.write_text("x")
    paths.crds.with_name("crds.yaml.stamp").write_text("v1.4.2\n")
    assert kuberay.built_kuberay(tmp_path) is None, "a stamp of another version is not reused"
    paths.crds.with_name("crds.yaml.stamp").write_text("v1.5.0\n")
    assert kuberay.built_kuberay(tmp_path) == paths, "warm: found without building"
    assert kuberay.ensure_kuberay(tmp_path) == paths


def test_the_crds_are_the_three_kinds_the_operator_watches():
    assert kuberay.KUBERAY_CRD_FILES == ("config/crd/bases/ray.io_rayclusters.yaml",
                                         "config/crd/bases/ray.io_rayjobs.yaml",
                                         "config/crd/bases/ray.io_rayservices.yaml")
    assert kuberay.KUBERAY_CRDS == ("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")


def test_a_module_without_a_crd_stops_the_build_naming_it(tmp_path, monkeypatch):
    module = tmp_path / "module"
    (module / "config" / "crd" / "bases").mkdir(parents=True)
    (module / "config" / "crd" / "bases" / "ray.io_rayclusters.yaml").write_text("kind: CustomResourceDefinition\n")
    paths = kuberay.kuberay_paths(tmp_path / "cache")
    paths.binary.parent.mkdir(parents=True)
    paths.binary.write_text("x")
    paths.binary.with_name("ray-operator.stamp").write_text("v1.5.0\n")
    monkeypatch.setattr(kuberay, "module_dir", lambda *args: module)
    monkeypatch.setattr(Builder, "_go_env", staticmethod(lambda: {}))
    with pytest.raises(BuildError, match=r"ray-operator@v1\.5\.0 has no config/crd/bases/ray\.io_rayjobs\.yaml"):
        kuberay.build(Builder(tmp_path / "cache", open("/dev/null", "w")), paths)  # noqa: SIM115
    assert not paths.crds.exists(), "nothing half-made is left"


def test_the_crds_are_joined_as_one_stamped_file(tmp_path, monkeypatch):
    module = tmp_path / "module"
    for path in kuberay.KUBERAY_CRD_FILES:
        (module / path).parent.mkdir(parents=True, exist_ok=True)
        (module / path).write_text(f"kind: CustomResourceDefinition\nmetadata: {{name: {path.rsplit('_', 1)[1]}}}\n")
    paths = kuberay.kuberay_paths(tmp_path / "cache")
    paths.binary.parent.mkdir(parents=True)
    paths.binary.write_text("x")
    paths.binary.with_name("ray-operator.stamp").write_text("v1.5.0\n")
    monkeypatch.setattr(kuberay, "module_dir", lambda *args: module)
    monkeypatch.setattr(Builder, "_go_env", staticmethod(lambda: {}))
    with open(tmp_path / "out", "w") as out:
        kuberay.build(Builder(tmp_path / "cache", out), paths)
    assert paths.crds.read_text().count("---\n") == 2
    assert kuberay.built_kuberay(tmp_path / "cache") == paths


def test_the_crds_alone_are_extracted_without_building_the_operator(tmp_path, monkeypatch):
    module = tmp_path / "module"
    for path in kuberay.KUBERAY_CRD_FILES:
        (module / path).parent.mkdir(parents=True, exist_ok=True)
        (module / path).write_text("kind: CustomResourceDefinition\n")
    monkeypatch.setattr(kuberay, "module_dir", lambda *args: module)
    monkeypatch.setattr(Builder, "_go_env", staticmethod(lambda: {}))
    with open(tmp_path / "out", "w") as out:
        crds = kuberay.ensure_kuberay_crds(tmp_path / "cache", out)
    paths = kuberay.kuberay_paths(tmp_path / "cache")
    assert crds == paths.crds and kuberay.built_kuberay(tmp_path / "cache") is None
    assert not paths.binary.exists(), "what the reconciler's informers need, without the 3-minute build"


def test_the_operator_listens_on_loopback_only_without_leader_election_or_a_batch_scheduler(tmp_path):
    args = rayoperator.operator_args(tmp_path / "ray-operator", 40001, 40002)
    assert args == [str(tmp_path / "ray-operator"), "--metrics-addr=127.0.0.1:40001",
                    "--health-probe-bind-address=127.0.0.1:40002", "--enable-leader-election=false",
                    "--log-stdout-encoder=console"]
    assert not any("batch-scheduler" in a for a in args), "KubeRay's batch scheduler is off (its default)"
