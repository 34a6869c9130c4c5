"""An in-memory :class:`~reconciler.daemon.certificates.manager.CertificateStore` for
tests (:class:`FakeCertificateStore`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.daemon.certificates.rules import CertificateError, ConfigState, SecretState


@dataclass
class FakeCertificateStore:
    """An in-memory :class:`~.manager.CertificateStore` with the API server's rules that matter here:
    resourceVersions bump on every write and a stale one is a conflict. ``writes`` records
    ``(kind, name)`` in order; ``fail_next`` makes the next write of that name raise."""

    secrets: dict[str, SecretState] = field(default_factory=dict)
    config: ConfigState | None = None
    config_webhooks: int = 1
    writes: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    fail_next: set[str] = field(default_factory=set)
    _version: int = 0

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    def create_empty(self, *names: str, with_config: bool = True) -> FakeCertificateStore:
        """The chart's install: empty Secrets and a configuration without a caBundle."""
        for name in names:
            self.secrets[name] = SecretState({}, self._bump())
        if with_config:
            self.config = ConfigState((b"",) * self.config_webhooks, None, self._bump())
        return self

    def read_secret(self, name: str) -> SecretState | None:
        return self.secrets.get(name)

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: SecretState) -> None:
        current = self.secrets.get(name)
        if name in self.fail_next:
            self.fail_next.discard(name)
            raise CertificateError(f"write of Secret {name} failed (injected)")
        if current is None or current.resource_version != previous.resource_version:
            raise CertificateError(f"Secret {name}: conflict")
        self.secrets[name] = SecretState(dict(data), self._bump())
        self.writes.append(("secret", name))

    def read_config(self) -> ConfigState | None:
        return self.config

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: ConfigState) -> None:
        if "config" in self.fail_next:
            self.fail_next.discard("config")
            raise CertificateError("write of the webhook configuration failed (injected)")
        if self.config is None or self.config.resource_version != previous.resource_version:
            raise CertificateError("webhook configuration: conflict")
        self.config = ConfigState((bundle,) * len(self.config.ca_bundles), at, self._bump())
        self.writes.append(("config", "caBundle"))

    def emit(self, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))
