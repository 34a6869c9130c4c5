"""Self-managed webhook certificates (reconciler/daemon/certificates/) against the in-memory store:
what each pass writes and in which order, and, over simulated months and minutes, that every
certificate a replica may be serving verifies against the caBundle the API server holds."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import replace

import pytest
from cryptography import x509
from cryptography.x509 import verification
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import certs
from reconciler.daemon.certificates import (
    CA_KEY,
    CERT_KEY,
    PRIVATE_KEY_KEY,
    CertificateError,
    CertificateManager,
    ConfigState,
    Settings,
    split_pem,
)
from reconciler.daemon.certificates.fake import FakeCertificateStore

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SECONDS = dt.timedelta(seconds=1)

#: A rotation test's timings: CA 180 s, serving 60 s, renewed 30 s before expiry, 5 s settle.
SHORT = Settings(namespace="troupe-system", service="troupe-webhook", webhook_configuration="troupe",
                 tls_secret="troupe-webhook-tls", ca_secret="troupe-webhook-ca",
                 validity=60 * SECONDS, renew_before=30 * SECONDS, ca_validity=180 * SECONDS, settle=5 * SECONDS)
DNS = "troupe-webhook.troupe-system.svc"


class Clock:
    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def installed(settings: Settings = SHORT) -> FakeCertificateStore:
    return FakeCertificateStore().create_empty(settings.ca_secret, settings.tls_secret)


def manager(store: FakeCertificateStore, clock: Clock, settings: Settings = SHORT) -> CertificateManager:
    return CertificateManager(store, settings, clock=clock)


def run_until(m: CertificateManager, clock: Clock, until: dt.datetime) -> None:
    """Sync at every ``next_check`` up to ``until``, as the manager's loop does, then stop the clock there."""
    decided = m.last or m.sync()
    while decided.next_check <= until:
        clock.now = max(clock.now, decided.next_check)
        decided = m.sync()
    clock.now = until


def serving(store: FakeCertificateStore) -> x509.Certificate:
    return x509.load_pem_x509_certificate(store.secrets[SHORT.tls_secret].data[CERT_KEY])


def current_ca(store: FakeCertificateStore) -> x509.Certificate:
    return x509.load_pem_x509_certificate(store.secrets[SHORT.ca_secret].data[CERT_KEY])


def bundle(store: FakeCertificateStore) -> list[x509.Certificate]:
    assert store.config is not None
    [pem] = set(store.config.ca_bundles)
    return split_pem(pem)


def verifies(cert: x509.Certificate, cas: list[x509.Certificate], at: dt.datetime, name: str = DNS) -> bool:
    """What an API server holding ``cas`` as caBundle decides at ``at`` (cryptography's own
    path validation, not the code under test)."""
    if not cas:
        return False
    verifier = (verification.PolicyBuilder().store(verification.Store(cas)).time(at)
                .build_server_verifier(verification.DNSName(name)))
    try:
        verifier.verify(cert, [])
    except verification.VerificationError:
        return False
    return True


# --- one pass at a time --------------------------------------------------------------------


def test_a_fresh_install_gets_a_ca_then_the_ca_bundle_then_a_serving_certificate() -> None:
    store, clock = installed(), Clock()

    manager(store, clock).sync()

    assert store.writes == [("secret", SHORT.ca_secret), ("config", "caBundle"), ("secret", SHORT.tls_secret)]
    assert verifies(serving(store), bundle(store), clock.now)
    assert bundle(store) == [current_ca(store)]
    tls = store.secrets[SHORT.tls_secret].data
    assert set(tls) == {CERT_KEY, PRIVATE_KEY_KEY, CA_KEY}
    assert tls[CA_KEY] == store.secrets[SHORT.ca_secret].data[CA_KEY]
    assert store.secrets[SHORT.ca_secret].data[PRIVATE_KEY_KEY] not in tls.values()  # the CA's key stays out


def test_the_serving_certificate_names_the_service_in_every_form_the_api_server_may_check() -> None:
    store = installed(replace(SHORT, extra_sans=("127.0.0.1",)))

    manager(store, Clock(), replace(SHORT, extra_sans=("127.0.0.1",))).sync()

    names = serving(store).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        "troupe-webhook", "troupe-webhook.troupe-system", "troupe-webhook.troupe-system.svc",
        "troupe-webhook.troupe-system.svc.cluster.local"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_the_serving_certificate_names_the_service_under_the_clusters_own_dns_domain() -> None:
    settings = replace(SHORT, cluster_domain="corp.internal")
    store = installed(settings)

    manager(store, Clock(), settings).sync()

    names = serving(store).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName)[-1] == "troupe-webhook.troupe-system.svc.corp.internal"
    assert not [n for n in names.get_values_for_type(x509.DNSName) if n.endswith("cluster.local")]


def test_a_second_pass_with_nothing_due_writes_nothing_and_says_when_to_look_again() -> None:
    store, clock = installed(), Clock()
    manager(store, clock).sync()
    store.writes.clear()
    clock.advance(10)

    decided = manager(store, clock).sync()

    assert store.writes == []
    assert decided.notes == []
    assert decided.next_check == serving(store).not_valid_after_utc - SHORT.renew_before


def test_a_serving_certificate_in_its_renewal_window_is_replaced_and_the_ca_kept() -> None:
    store, clock = installed(), Clock()
    manager(store, clock).sync()
    ca, old = current_ca(store), serving(store)
    store.writes.clear()
    clock.now = old.not_valid_after_utc - SHORT.renew_before + SECONDS

    decided = manager(store, clock).sync()

    assert store.writes == [("secret", SHORT.tls_secret)]
    assert current_ca(store) == ca
    assert serving(store).serial_number != old.serial_number
    assert "within the renewal window" in decided.notes[0]


def test_a_ca_too_close_to_expiry_is_replaced_kept_beside_the_new_one_and_the_serving_certificate_waits_to_settle() -> None:
    store, clock = installed(), Clock()
    m = manager(store, clock)
    m.sync()
    old_ca = current_ca(store)
    run_until(m, clock, old_ca.not_valid_after_utc - SHORT.validity - SECONDS)
    clock.advance(1)  # a new certificate would now be cut short
    old_serving = serving(store)
    store.writes.clear()

    first = m.sync()

    assert [c.subject for c in bundle(store)] == [current_ca(store).subject, old_ca.subject]
    # The serving Secret's ca.crt follows the bundle; its pair stays until the new CA settles.
    assert store.writes == [("secret", SHORT.ca_secret), ("config", "caBundle"), ("secret", SHORT.tls_secret)]
    assert "settles in the caBundle" in first.waiting
    assert first.next_check == clock.now + SHORT.settle
    assert serving(store) == old_serving and verifies(old_serving, bundle(store), clock.now)

    clock.now = first.next_check
    store.writes.clear()
    m.sync()

    assert store.writes == [("secret", SHORT.tls_secret)]
    assert verifies(serving(store), [current_ca(store)], clock.now)
    assert verifies(old_serving, bundle(store), clock.now)  # a replica not yet updated still passes


def test_a_retired_ca_leaves_the_bundle_once_it_has_expired() -> None:
    store, clock = installed(), Clock()
    m = manager(store, clock)
    m.sync()
    old_ca = current_ca(store)
    run_until(m, clock, old_ca.not_valid_after_utc - SHORT.validity + 2 * SHORT.settle)
    assert len(bundle(store)) == 2

    clock.now = old_ca.not_valid_after_utc
    decided = m.sync()

    assert bundle(store) == [current_ca(store)]
    assert "1 expired CA(s) leave the bundle" in decided.notes


def test_an_emptied_ca_secret_gives_a_new_ca_and_keeps_trusting_the_one_in_the_configuration() -> None:
    store, clock = installed(), Clock()
    m = manager(store, clock)
    m.sync()
    old_ca, old_serving = current_ca(store), serving(store)
    store.secrets[SHORT.ca_secret] = replace(store.secrets[SHORT.ca_secret], data={})  # `helm upgrade --force`
    clock.advance(1)

    m.sync()

    assert current_ca(store) != old_ca
    assert old_ca in bundle(store)
    assert verifies(old_serving, bundle(store), clock.now)


@pytest.mark.parametrize(("what", "damage"), [
    ("a key that is not the certificate's", lambda data: {**data, PRIVATE_KEY_KEY: certs.create_ca().key_pem}),
    ("a certificate that does not parse", lambda data: {**data, CERT_KEY: b"-----BEGIN CERTIFICATE-----\nxx\n"}),
    ("a certificate for other names", lambda data: {**data, **dict(zip(
        (CERT_KEY, PRIVATE_KEY_KEY), (lambda p: (p.cert_pem, p.key_pem))(
            certs.create_serving_cert(certs.create_ca(), ["elsewhere.svc"], days=1)), strict=True))}),
])
def test_a_damaged_serving_secret_is_replaced(what: str, damage: object) -> None:
    store, clock = installed(), Clock()
    m = manager(store, clock)
    m.sync()
    state = store.secrets[SHORT.tls_secret]
    store.secrets[SHORT.tls_secret] = replace(state, data=damage(dict(state.data)))  # type: ignore[operator]
    store.writes.clear()

    m.sync()

    assert store.writes == [("secret", SHORT.tls_secret)], what
    assert verifies(serving(store), bundle(store), clock.now)


def _without_basic_constraints() -> tuple[x509.Certificate, bytes, bytes]:
    """A self-signed certificate with no BasicConstraints (what an X.509 v1 CA looks like):
    the certificate, its PEM and its key's PEM."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hand-made v1 ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(T0 - dt.timedelta(days=1)).not_valid_after(T0 + dt.timedelta(days=365))
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert, cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_a_ca_without_basic_constraints_in_the_secret_and_the_bundle_is_replaced_never_a_crash() -> None:
    v1, pem, key_pem = _without_basic_constraints()
    store, clock = installed(), Clock()
    store.secrets[SHORT.ca_secret] = replace(store.secrets[SHORT.ca_secret],
                                             data={CERT_KEY: pem, PRIVATE_KEY_KEY: key_pem, CA_KEY: pem})
    assert store.config is not None
    store.config = replace(store.config, ca_bundles=(pem,))
    m = manager(store, clock)

    decided = m.sync()

    assert any("is not a CA" in note for note in decided.notes), decided.notes
    assert current_ca(store).subject != v1.subject, "a new CA replaces it"
    assert v1 not in bundle(store), "and it is not trusted"
    run_until(m, clock, clock.now + 10 * SECONDS)
    assert verifies(serving(store), bundle(store), clock.now), "the webhook gets a serving certificate"


def test_without_the_webhook_configuration_the_secrets_are_filled_and_the_wait_is_named() -> None:
    store, clock = FakeCertificateStore().create_empty(SHORT.ca_secret, SHORT.tls_secret, with_config=False), Clock()

    decided = manager(store, clock).sync()

    assert store.writes == [("secret", SHORT.ca_secret), ("secret", SHORT.tls_secret)]
    assert decided.waiting == "the MutatingWebhookConfiguration troupe does not exist or has no webhooks"


def test_a_failed_configuration_write_stops_the_pass_before_the_serving_secret_and_the_next_pass_finishes() -> None:
    store, clock = installed(), Clock()
    store.fail_next.add("config")
    m = manager(store, clock)

    with pytest.raises(CertificateError, match="webhook configuration"):
        m.sync()
    assert store.writes == [("secret", SHORT.ca_secret)]

    m.sync()
    assert store.writes[1:] == [("config", "caBundle"), ("secret", SHORT.tls_secret)]
    assert verifies(serving(store), bundle(store), clock.now)


def test_every_webhook_of_the_configuration_gets_the_bundle() -> None:
    store = FakeCertificateStore(config_webhooks=2).create_empty(SHORT.ca_secret, SHORT.tls_secret)

    manager(store, Clock()).sync()

    assert store.config is not None and len(set(store.config.ca_bundles)) == 1 and len(store.config.ca_bundles) == 2


def test_a_bundle_written_by_hand_without_the_timestamp_counts_as_settled() -> None:
    store, clock = installed(), Clock()
    m = manager(store, clock)
    m.sync()
    assert store.config is not None
    store.config = ConfigState(store.config.ca_bundles, None, store.config.resource_version)
    clock.now = serving(store).not_valid_after_utc - SHORT.renew_before

    m.sync()

    assert store.writes[-1] == ("secret", SHORT.tls_secret)


def test_missing_secrets_are_named_and_nothing_is_written() -> None:
    store = FakeCertificateStore().create_empty(SHORT.tls_secret)

    with pytest.raises(CertificateError, match="Secret troupe-system/troupe-webhook-ca does not exist"):
        manager(store, Clock()).sync()
    assert store.writes == []


@pytest.mark.parametrize(("changes", "message"), [
    ({"renew_before": 60 * SECONDS}, "--webhook-cert-validity-seconds: must be more than --webhook-cert-renew-before-seconds (60)"),
    ({"ca_validity": 60 * SECONDS}, "--webhook-ca-validity-seconds: must be more than --webhook-cert-validity-seconds (60)"),
    ({"settle": 30 * SECONDS}, "--webhook-cert-renew-before-seconds: must be more than --webhook-cert-settle-seconds (30)"),
    ({"settle": 0 * SECONDS}, "--webhook-cert-settle-seconds: must be positive"),
    ({"ca_secret": "troupe-webhook-tls"}, "--webhook-ca-secret: must differ from --webhook-tls-secret"),
    ({"service": ""}, "--webhook-service: must not be empty"),
])
def test_settings_that_do_not_nest_are_refused_naming_the_flag(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replace(SHORT, **changes)


# --- over time: what a replica serves always verifies ---------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wakes=st.lists(st.integers(1, 40), min_size=5, max_size=40),
    replica_lag=st.integers(0, 20),
    api_server_lag=st.integers(0, 4),
)
def test_whatever_a_lagging_replica_serves_verifies_against_the_bundle_a_lagging_api_server_holds(
    wakes: list[int], replica_lag: int, api_server_lag: int
) -> None:
    """The manager syncs at each ``next_check`` and at extra wake-ups (watch events); a
    replica serves the serving Secret as it was ``replica_lag`` seconds ago (the kubelet's
    propagation), an API server the caBundle as it was ``api_server_lag`` seconds ago (its
    watch). Every second for ~10 minutes (3 CA rotations), once the install has reached both,
    the served certificate verifies."""
    store, clock = installed(), Clock()
    m = manager(store, clock)
    secret_history: list[tuple[dt.datetime, bytes]] = []
    bundle_history: list[tuple[dt.datetime, bytes]] = []

    def record() -> None:
        secret_history.append((clock.now, store.secrets[SHORT.tls_secret].data.get(CERT_KEY, b"")))
        assert store.config is not None
        bundle_history.append((clock.now, store.config.ca_bundles[0]))

    def as_of(history: list[tuple[dt.datetime, bytes]], t: dt.datetime) -> bytes:
        seen = [value for at, value in history if at <= t]
        return seen[-1] if seen else b""

    decided = m.sync()
    record()
    end = T0 + dt.timedelta(minutes=10)
    extra = itertools.cycle(wakes)
    checked = 0
    t = T0
    while clock.now < end:
        wake = clock.now + dt.timedelta(seconds=next(extra))
        upcoming = min(decided.next_check, wake)
        while t < upcoming and t < end:  # what the API server sees until the next pass
            served = as_of(secret_history, t - dt.timedelta(seconds=replica_lag))
            trusted = split_pem(as_of(bundle_history, t - dt.timedelta(seconds=api_server_lag)))
            if served and trusted:  # else the install is still in progress: nothing worked yet
                cert = x509.load_pem_x509_certificate(served)
                assert verifies(cert, trusted, t), f"at +{(t - T0).total_seconds():.0f}s"
                checked += 1
            t += SECONDS
        clock.now = max(upcoming, clock.now)
        decided = m.sync()
        record()
        assert all(c.not_valid_after_utc > clock.now for c in bundle(store)), "an expired CA is still trusted"
    assert checked > 500
