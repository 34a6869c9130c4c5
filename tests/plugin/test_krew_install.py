"""``kubectl troupe`` installed as the README says: the archive ``make plugin`` builds
(devtools/krew.py: PyInstaller's single executable, packed for krew, and the manifest with its
sha256), installed by the real krew (built from its Go module into the cache, like the control
plane's binaries) and run by the real kubectl from krew's PATH
(docs/decisions/055-plugin-executable.md).

The build takes about a minute and a half on two busy cores; the module is marked e2e because
it needs the cached kubectl of ``make cluster-build`` (no control plane is started).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from PyInstaller.archive.readers import CArchiveReader

from devtools import krew
from devtools.devcluster.build import built_binaries, ensure_built
from devtools.devcluster.ecosystem import ensure_krew
from reconciler.tools import plugin

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "examples" / "snapshot.json"


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> krew.Build:
    """This platform's archive and manifest, made by what ``make plugin`` runs."""
    made = krew.build(tmp_path_factory.mktemp("dist"))
    print(f"\nkubectl-troupe: built in {made.seconds:.0f} s, executable {made.executable_bytes / 1e6:.1f} MB")
    return made


@pytest.fixture(scope="module")
def krew_root(built: krew.Build, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KREW_ROOT into which the real krew installed the built archive by its manifest."""
    root = tmp_path_factory.mktemp("krew-root")
    done = subprocess.run([str(ensure_krew()), "install", f"--manifest={built.manifest}", f"--archive={built.archive}"],
                          env={**os.environ, "KREW_ROOT": str(root), "HOME": str(root)}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert 'Installed plugin: troupe' in done.stderr + done.stdout
    return root


def kubectl(krew_root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``kubectl argv...`` with only krew's bin and kubectl's own directory on the PATH."""
    binary = (built_binaries() or ensure_built()).kubectl
    path = f"{krew_root / 'bin'}{os.pathsep}{binary.parent}"
    return subprocess.run([str(binary), *argv], env={**os.environ, "PATH": path, "HOME": str(krew_root)},
                          capture_output=True, text=True, timeout=120, check=False, cwd=krew_root)


def test_the_archive_holds_the_executable_and_the_license_and_the_manifest_its_sha256(built):
    with tarfile.open(built.archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["LICENSE", "kubectl-troupe"]
    assert members["kubectl-troupe"].mode == 0o755
    manifest = yaml.safe_load(built.manifest.read_text())
    [platform] = manifest["spec"]["platforms"]
    assert platform["selector"]["matchLabels"] == dict(zip(("os", "arch"), krew.this_platform(), strict=True))
    assert platform["sha256"] == krew.sha256_of(built.archive) == built.sha256


def test_kubectl_runs_the_krew_installed_plugin_on_a_snapshot(krew_root, capsys):
    listed = kubectl(krew_root, "plugin", "list")
    assert str(krew_root / "bin" / "kubectl-troupe") in listed.stdout, listed.stdout + listed.stderr
    table = kubectl(krew_root, "troupe", "status", "--snapshot", str(SNAPSHOT), "-A")
    assert table.returncode == 0, table.stderr
    names = kubectl(krew_root, "troupe", "status", "--snapshot", str(SNAPSHOT), "-A", "-o", "name")
    assert plugin.main(["status", "--snapshot", str(SNAPSHOT), "-A", "-o", "name"]) == 0
    assert names.stdout == capsys.readouterr().out  # the executable answers as the source does
    assert names.stdout and all(line.startswith("gang.troupe.io/") for line in names.stdout.splitlines())
    listed_json = kubectl(krew_root, "troupe", "status", "--snapshot", str(SNAPSHOT), "-A", "-o", "json")
    assert listed_json.returncode == 0, listed_json.stderr
    items = json.loads(listed_json.stdout)["items"]
    assert [f"gang.troupe.io/{i['metadata']['name']}" for i in items] == names.stdout.splitlines()
    gangs = [i["spec"]["gangName"] for i in items]
    assert {"urgent", "wide", "train", "sweep"} <= set(gangs)
    assert [line.split()[1] for line in table.stdout.splitlines()[1:]] == gangs


def test_the_plugin_reaches_for_a_cluster_with_the_kubernetes_client_it_carries(krew_root, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}]}))
    done = kubectl(krew_root, "troupe", "status", "--kubeconfig", str(kubeconfig), "--request-timeout", "5s")
    assert done.returncode == 1
    assert done.stderr.strip() == "kubectl-troupe: list pods: cannot reach the API server https://127.0.0.1:1: " \
                                  "Connection refused", done.stderr


def test_the_executable_carries_no_server_and_no_asyncio_client(built, tmp_path):
    with tarfile.open(built.archive) as tar:
        tar.extract("kubectl-troupe", tmp_path, filter="data")
    modules = CArchiveReader(str(tmp_path / "kubectl-troupe")).open_embedded_archive("PYZ.pyz").toc
    packages = {name.split(".")[0] for name in modules}
    assert {"reconciler", "troupe", "kubernetes", "yaml", "msgspec", "celpy"} <= packages
    assert packages.isdisjoint({"flask", "werkzeug", "gunicorn", "aiohttp", "mypy", "hypothesis", "pytest"})
    assert not any(name.startswith(("kubernetes.aio", "webhook.server", "webhook.app")) for name in modules)
