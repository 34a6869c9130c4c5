"""The krew manifest a release publishes (devtools/krew.py ``manifest``): plugins/troupe.yaml
with each platform's sha256 that of its archive, as krew checks it on install."""

from __future__ import annotations

import tarfile

import pytest
import yaml

from devtools import krew

PLATFORMS = [("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")]


def archives(tmp_path, platforms):
    for os_name, arch in platforms:
        (tmp_path / krew.archive_name(os_name, arch)).write_bytes(f"{os_name}/{arch}".encode())
    return krew.archives_in(tmp_path)


def test_the_release_manifest_names_each_of_the_four_archives_sha256(tmp_path):
    found = archives(tmp_path, PLATFORMS)
    assert sorted(found) == sorted(PLATFORMS)
    manifest = yaml.safe_load(krew.write_manifest(found, tmp_path / "troupe.yaml").read_text())
    template = yaml.safe_load(krew.MANIFEST.read_text())
    got = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p["sha256"]
           for p in manifest["spec"]["platforms"]}
    assert got == {key: krew.sha256_of(path) for key, path in found.items()}
    assert len(set(got.values())) == 4
    assert {k: v for k, v in manifest.items() if k != "spec"} == {k: v for k, v in template.items() if k != "spec"}
    assert manifest["spec"]["description"] == template["spec"]["description"]


def test_a_platform_without_its_archive_is_left_out(tmp_path):
    manifest = yaml.safe_load(krew.write_manifest(archives(tmp_path, [("linux", "arm64")]),
                                                  tmp_path / "troupe.yaml").read_text())
    assert [p["selector"]["matchLabels"] for p in manifest["spec"]["platforms"]] == [{"os": "linux", "arch": "arm64"}]


def test_no_archive_for_any_platform_is_an_error_naming_them(tmp_path):
    with pytest.raises(krew.KrewError, match=r"no platform for the archives given \(windows/amd64\)"):
        krew.write_manifest({("windows", "amd64"): tmp_path / "x.tar.gz"}, tmp_path / "troupe.yaml")


def test_the_archive_packs_to_the_same_bytes_with_the_executable_at_mode_0755(tmp_path):
    executable = tmp_path / "kubectl-troupe"
    executable.write_bytes(b"\x7fELF...")
    first = krew.pack(executable, tmp_path / "a" / "one.tar.gz")
    executable.touch()  # a new mtime packs the same
    second = krew.pack(executable, tmp_path / "b" / "two.tar.gz")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert [(m.name, m.mode) for m in tar.getmembers()] == [("kubectl-troupe", 0o755), ("LICENSE", 0o644)]


@pytest.mark.parametrize(("system", "machine", "want"), [
    ("Linux", "x86_64", ("linux", "amd64")), ("Linux", "aarch64", ("linux", "arm64")),
    ("Darwin", "x86_64", ("darwin", "amd64")), ("Darwin", "arm64", ("darwin", "arm64"))])
def test_platforms_in_krews_terms(system, machine, want):
    assert krew.this_platform(system, machine) == want


def test_a_platform_without_a_build_is_named(tmp_path):
    with pytest.raises(krew.KrewError, match=r"no krew build for platform Windows/AMD64"):
        krew.this_platform("Windows", "AMD64")
