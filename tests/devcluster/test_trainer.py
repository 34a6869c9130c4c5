"""How Kubeflow Trainer v2's manager is patched, stamped and laid out, without building."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.devcluster import trainer
from devtools.devcluster.toolchain import BuildError

#: The two places of the module's cmd/trainer-controller-manager/main.go that are patched.
MAIN_GO = """\
\tmgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
\t\tWebhookServer: webhook.NewServer(webhook.Options{
\t\t\tPort:    webhookServerPort,
\t\t\tTLSOpts: tlsOpts,
\t\t}),
\t})
\tif err = cert.ManageCerts(mgr, cert.Config{
\t\tWebhookSecretName: webhookSecretName,
\t}, certsReady); err != nil {
"""


def _module(tmp_path: Path, text: str) -> Path:
    main = tmp_path / trainer.TRAINER_MAIN
    main.parent.mkdir(parents=True)
    main.write_text(text)
    return main


def test_the_webhook_server_binds_loopback_and_the_rotator_gives_way_to_a_given_certificate(tmp_path):
    main = _module(tmp_path, MAIN_GO)
    trainer.patch_main(tmp_path)
    text = main.read_text()
    assert f'Host: "127.0.0.1", CertDir: os.Getenv("{trainer.CERT_DIR_ENV}"), Port: webhookServerPort,' in text
    assert f'if os.Getenv("{trainer.CERT_DIR_ENV}") != "" {{ close(ready); return nil }}' in text
    assert "return cert.ManageCerts(m, c, ready) }(mgr, cert.Config{" in text, "the rotator still runs without it"
    assert text.count("cert.ManageCerts(") == 1


@pytest.mark.parametrize("missing", [line for line, _ in trainer.MAIN_PATCHES])
def test_a_release_without_a_line_to_patch_stops_the_build_naming_it(tmp_path, missing):
    _module(tmp_path, MAIN_GO.replace(missing, "// moved"))
    with pytest.raises(BuildError, match="patch it anew") as raised:
        trainer.patch_main(tmp_path)
    assert repr(missing) in str(raised.value)


def test_the_cache_keeps_the_manager_and_its_manifests_by_version_and_the_patch_rebuilds_it(tmp_path):
    paths = trainer.trainer_paths(tmp_path)
    assert paths.binary == tmp_path / "trainer-v2.0.0" / "bin" / "trainer-controller-manager"
    assert {p.name for p in (paths.crds, paths.webhooks, paths.torch_runtime)} == {
        "crds.yaml", "webhooks.yaml", "torch-distributed.yaml"}
    stamps = dict(trainer.versions(paths))
    assert stamps[paths.binary].startswith(trainer.TRAINER_VERSION + " +")
    assert trainer.built_trainer(tmp_path) is None, "nothing stamped yet"
