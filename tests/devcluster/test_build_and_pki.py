"""The wrapper go.mod, the cache layout and the static token file, without building anything."""

from __future__ import annotations

import stat

import pytest
import yaml

from devtools.devcluster import build, pki, toolchain

KUBERNETES_GO_MOD = """\
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tgithub.com/foo/bar v1.0.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
\tgithub.com/other/thing => github.com/fork/thing v1.2.3
)

replace k8s.io/streaming => ./staging/src/k8s.io/streaming
"""


def test_staging_replacements_lists_only_modules_pointing_at_staging_directories():
    assert build.staging_replacements(KUBERNETES_GO_MOD) == [
        "k8s.io/api",
        "k8s.io/cri-streaming",
        "k8s.io/streaming",
    ]


def test_the_wrapper_go_mod_copies_go_and_godebug_and_pins_staging_modules_to_v0():
    text = build.kubernetes_wrapper_go_mod(KUBERNETES_GO_MOD, "v1.36.3")

    lines = [line.strip() for line in text.splitlines()]
    assert "go 1.26.0" in lines
    assert "godebug default=go1.26" in lines
    assert "require k8s.io/kubernetes v1.36.3" in lines
    assert "k8s.io/api => k8s.io/api v0.36.3" in lines
    assert "k8s.io/streaming => k8s.io/streaming v0.36.3" in lines
    assert "github.com/other/thing" not in text


def test_cache_dir_follows_troupe_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TROUPE_CACHE_DIR", str(tmp_path))

    assert build.cache_dir() == tmp_path
    assert build.built_binaries() is None  # an empty cache is not reused


def test_a_binary_without_its_stamp_or_with_another_version_is_not_reused(tmp_path):
    layout = build._layout(tmp_path)
    for path, version in build._versions(layout):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        toolchain.stamp_path(path).write_text(version + "\n")
    assert build.built_binaries(tmp_path) == layout

    toolchain.stamp_path(layout.kube_scheduler).write_text("v1.35.4\n")
    assert build.built_binaries(tmp_path) is None
    toolchain.stamp_path(layout.kube_scheduler).unlink()
    assert build.built_binaries(tmp_path) is None
    toolchain.stamp_path(layout.kube_scheduler).write_text(build.control_plane_version() + "\n")
    toolchain.stamp_path(layout.jobset).write_text("v0.10.1\n")  # built with its own go.mod's libraries
    assert build.built_binaries(tmp_path) is None


def test_the_control_plane_is_the_pinned_release_unless_the_compatibility_run_picks_an_older_one(
        tmp_path, monkeypatch):
    monkeypatch.delenv(toolchain.VERSION_ENV, raising=False)
    assert toolchain.control_plane_version() == toolchain.KUBERNETES_VERSION == "v1.37.2"
    assert build._layout(tmp_path).kube_apiserver == tmp_path / "k8s-v1.37.2" / "bin" / "kube-apiserver"

    monkeypatch.setenv(toolchain.VERSION_ENV, "v1.36.3")
    assert toolchain.control_plane_version() == "v1.36.3"
    layout = build._layout(tmp_path)
    assert layout.kubectl == tmp_path / "k8s-v1.36.3" / "bin" / "kubectl"
    assert (layout.kube_scheduler, "v1.36.3") in build._versions(layout)
    # the workload controllers stay compiled against the pinned release's libraries
    assert layout.jobset == build._layout(tmp_path).jobset
    assert all("k8s.io/v0.37.2" in version for path, version in build._versions(layout) if path == layout.jobset)

    monkeypatch.setenv(toolchain.VERSION_ENV, "v1.30.0")
    with pytest.raises(toolchain.BuildError, match=r"TROUPE_KUBERNETES_VERSION='v1.30.0'.*v1.37.2, v1.36.3"):
        toolchain.control_plane_version()


def test_token_file_lines_quote_the_group_list():
    line = pki.token_file_line("tok", pki.RECONCILER, "uid-1")

    assert (
        line
        == 'tok,system:serviceaccount:troupe-system:troupe-reconciler,uid-1,"system:serviceaccounts,system:serviceaccounts:troupe-system"'
    )


def test_write_pki_makes_one_token_per_identity_with_admin_first_and_private_modes(tmp_path):
    made = pki.write_pki(tmp_path, pki.DEFAULT_IDENTITIES)

    lines = made.token_file.read_text().splitlines()
    assert [line.split(",")[1] for line in lines] == [
        "admin",
        "system:serviceaccount:troupe-system:troupe-reconciler",
        "alice",
    ]
    assert lines[0].endswith(',"system:masters"')
    assert set(made.tokens) == {"admin", "reconciler", "alice"}
    assert len(set(made.tokens.values())) == 3
    for private in (made.ca_key, made.serving_key, made.sa_private_key, made.token_file):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private


def test_a_kubeconfig_carries_the_server_the_ca_and_the_token(tmp_path):
    path = pki.write_kubeconfig(tmp_path / "k", "https://127.0.0.1:6443", b"PEM", "alice", "t0k")

    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": "UEVN",
    }
    assert config["users"][0]["user"] == {"token": "t0k"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_helm_is_linked_with_its_version_and_the_kubernetes_version_of_its_client_go():
    go_mod = "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.34.0\n\tk8s.io/client-go v0.34.0\n)\n"

    flags = build.helm_ldflags(go_mod, "v3.19.0")

    assert "-X helm.sh/helm/v3/internal/version.version=v3.19.0" in flags
    for pkg in ("helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"):
        assert f"-X {pkg}.k8sVersionMajor=1" in flags
        assert f"-X {pkg}.k8sVersionMinor=34" in flags


def test_helm_ldflags_refuse_a_go_mod_without_client_go():
    with pytest.raises(build.BuildError, match=r"k8s\.io/client-go"):
        build.helm_ldflags("module helm.sh/helm/v3\n")


def test_the_chart_tests_find_helm_when_only_helm_is_built(tmp_path):
    assert build.built_helm(tmp_path) is None

    helm = build._layout(tmp_path).helm
    helm.parent.mkdir(parents=True)
    helm.write_text("x")
    toolchain.stamp_path(helm).write_text(build.HELM_VERSION + "\n")

    assert build.built_helm(tmp_path) == helm
    assert build.built_binaries(tmp_path) is None  # the control plane is still missing
    toolchain.stamp_path(helm).write_text("v3.18.0\n")
    assert build.built_helm(tmp_path) is None
