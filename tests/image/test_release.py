"""The release's local checks (devtools/release.py, ``make release-check``) and the release
workflow they stand for: the version is the same everywhere, a difference is named, and the
workflow builds the image for the platforms whose lock the check verifies."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml

from devtools import krew
from devtools.release import (
    DIST_PREFIX,
    artifact_problems,
    stated_versions,
    version_mismatches,
)

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def checkout_copy(tmp_path: Path) -> Path:
    """The files that state the version, and the packages the plugin runs from, under tmp_path."""
    copy = tmp_path / "repo"
    (copy / "charts" / "troupe").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    shutil.copy(REPO / "charts" / "troupe" / "Chart.yaml", copy / "charts" / "troupe" / "Chart.yaml")
    for package in ("troupe", "reconciler"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_version_is_the_same_in_every_place_that_states_one() -> None:
    stated = stated_versions(REPO)

    assert set(stated) == {"pyproject.toml project.version", "charts/troupe/Chart.yaml version",
                           "charts/troupe/Chart.yaml appVersion", "troupe/__init__.py __version__",
                           "kubectl troupe --version"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", stated["pyproject.toml project.version"])
    assert version_mismatches(stated) == []


def test_a_version_that_differs_is_named_with_where_it_is(tmp_path: Path) -> None:
    copy = checkout_copy(tmp_path)
    version = stated_versions(copy)["pyproject.toml project.version"]
    chart = copy / "charts" / "troupe" / "Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{version}"', 'appVersion: "9.9.9"'))
    init = copy / "troupe" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{version}"', '__version__ = "9.9.8"'))

    problems = version_mismatches(stated_versions(copy))

    assert problems == [
        f"charts/troupe/Chart.yaml appVersion: 9.9.9, but pyproject.toml project.version says {version}",
        f"troupe/__init__.py __version__: 9.9.8, but pyproject.toml project.version says {version}",
        f"kubectl troupe --version: 9.9.8, but pyproject.toml project.version says {version}",
    ]


def test_a_tag_that_is_not_the_version_is_refused() -> None:
    stated = {"pyproject.toml project.version": "1.2.3", "elsewhere": "1.2.3"}

    assert version_mismatches(stated, "v1.2.3") == []
    assert version_mismatches(stated, "1.2.3") == ["tag 1.2.3: the release of version 1.2.3 is tagged v1.2.3"]


def test_a_wheel_of_another_name_or_without_the_plugin_is_named(tmp_path: Path) -> None:
    info = f"{DIST_PREFIX}-1.2.3.dist-info"
    with zipfile.ZipFile(tmp_path / f"{DIST_PREFIX}-1.2.3-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.4\nName: troupe\nVersion: 1.2.3\n")
        wheel.writestr(f"{info}/entry_points.txt", "[console_scripts]\nkubectl-gangs = reconciler.tools.plugin:main\n")

    problems = artifact_problems(tmp_path, "1.2.3")

    assert problems == [
        f"{DIST_PREFIX}-1.2.3-py3-none-any.whl: METADATA has no Name: troupe-scheduler",
        f"{DIST_PREFIX}-1.2.3-py3-none-any.whl: no console script kubectl-troupe = reconciler.tools.plugin:main",
        f"{tmp_path / (DIST_PREFIX + '-1.2.3.tar.gz')}: missing",
        f"{tmp_path / 'troupe-1.2.3.tgz'}: missing",
    ]


@pytest.fixture(scope="module")
def workflow() -> dict[str, object]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def steps(workflow: dict[str, object], job: str) -> list[dict[str, object]]:
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict)
    return list(jobs[job]["steps"])


def test_the_workflow_runs_on_a_version_tag_and_checks_before_it_publishes(workflow: dict[str, object]) -> None:
    on = workflow[True]  # YAML 1.1 reads the key `on` as the boolean true
    assert on == {"push": {"tags": ["v[0-9]+.[0-9]+.[0-9]+"]}}
    runs = [str(s.get("run", "")) for s in steps(workflow, "check")]
    assert any(r.startswith("make release-check") for r in runs)
    assert any('devtools.release versions --tag "$GITHUB_REF_NAME"' in r for r in runs)
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict)
    assert jobs["image"]["needs"] == jobs["chart"]["needs"] == jobs["plugin"]["needs"] == "check"
    assert set(jobs["publish"]["needs"]) == {"check", "image", "chart", "plugin"}


def test_the_image_is_built_with_its_sbom_for_the_platforms_whose_lock_release_check_downloads(
    workflow: dict[str, object]
) -> None:
    [build] = [s for s in steps(workflow, "image") if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    inputs = build["with"]
    assert isinstance(inputs, dict)
    makefile = (REPO / "Makefile").read_text()
    [checked] = re.findall(r"^IMAGE_PLATFORMS := (.+)$", makefile, flags=re.M)
    arch = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}

    assert inputs["sbom"] is True and inputs["provenance"] == "mode=max" and inputs["push"] is True
    assert sorted(inputs["platforms"].split(",")) == sorted(arch[a] for a in checked.split())


def test_the_chart_is_pushed_as_an_oci_artifact_and_the_plugin_attached(workflow: dict[str, object]) -> None:
    chart_runs = " ".join(str(s.get("run", "")) for s in steps(workflow, "chart"))
    publish_runs = " ".join(str(s.get("run", "")) for s in steps(workflow, "publish"))

    assert re.search(r'helm push "dist/troupe-\$\{GITHUB_REF_NAME#v\}\.tgz" "oci://ghcr\.io/', chart_runs)
    assert "gh release create" in publish_runs and "dist/*.whl" in publish_runs


def test_the_plugin_is_built_on_each_platform_of_its_manifest_and_published_with_their_sha256s(
    workflow: dict[str, object]
) -> None:
    """krew's manifest (plugins/troupe.yaml) names four platforms; PyInstaller builds only for
    the one it runs on, so each gets a runner of its own, and the release's troupe.yaml is
    written from the four archives (devtools/krew.py)."""
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict)
    matrix = jobs["plugin"]["strategy"]["matrix"]["include"]
    manifest = yaml.safe_load(krew.MANIFEST.read_text())
    platforms = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
                 for p in manifest["spec"]["platforms"]}
    assert sorted((m["os"], m["arch"]) for m in matrix) == sorted(platforms)
    assert len({m["runner"] for m in matrix}) == len(matrix)
    plugin_runs = [str(s.get("run", "")) for s in steps(workflow, "plugin")]
    assert "make plugin" in plugin_runs
    [upload] = [s for s in steps(workflow, "plugin") if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "dist/" + krew.archive_name("${{ matrix.os }}", "${{ matrix.arch }}")
    publish_runs = " ".join(str(s.get("run", "")) for s in steps(workflow, "publish"))
    assert "python -m devtools.krew manifest --dist dist" in publish_runs
    assert f"dist/kubectl-troupe-*.tar.gz dist/{krew.MANIFEST.name}" in publish_runs
