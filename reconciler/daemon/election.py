"""Leader election on a ``coordination.k8s.io/v1`` Lease, and the fence every write passes.

Modelled on client-go's ``tools/leaderelection`` (``leaderelection.go``), with what
Troupe needs and the Python client's package lacks (docs/decisions/016-bounded-failure-detection.md):

- **Every Lease call is bounded**: a request gets at most what is left of the renew
  deadline (and never more than :data:`LEASE_REQUEST_SECONDS`), so a hung connection cannot
  keep the renew loop past its deadline.
- **Times are monotonic**: a candidate measures the holder's lease from the moment *it*
  saw the record change (client-go's ``observedTime``), never from the wall-clock
  ``renewTime`` another machine wrote, so clock skew between replicas does not matter.
- **A fence**: :meth:`Elector.check` says, with no I/O, whether this replica may still
  write: only while it leads and less than ``renew_seconds`` have passed since it *sent*
  its last successful renew. Another replica can take over only ``lease_seconds`` after
  it *saw* that renew, so the writes stop ``lease_seconds - renew_seconds`` (5 s with the
  defaults) before anyone else may start. A process frozen (SIGSTOP, a stalled VM) past
  that moment finds the fence closed when it resumes. :meth:`Elector.confirm` also reads
  the Lease back from the API server: a batch of writes starts only if this replica is
  still the holder there.
- **Release on a clean shutdown** (client-go's ``ReleaseOnCancel``): the Lease is given up
  (no holder, a 1 s duration), so the next leader takes over at its next retry instead
  of waiting out the lease.

The Lease itself is reached through :class:`LeaseApi` (``reconciler.kube.KubeLeases``
against a real API server); tests drive :class:`Elector` with a fake one and a fake clock.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reconciler.ports import LostLeadership

log = logging.getLogger(__name__)

#: The longest a single Lease request may take, seconds (less when the renew deadline is nearer).
LEASE_REQUEST_SECONDS = 5.0
#: The shortest: below it a request cannot succeed anyway, seconds.
MIN_REQUEST_SECONDS = 0.2
#: client-go's ``JitterFactor``: a follower waits ``retry * (1 + random() * 0.2)``.
JITTER = 0.2
#: How long a read-back of the Lease stands for the confirmations after it, seconds
#: (docs/decisions/062-confirmations-coalesced.md): releases that start within it share one.
CONFIRM_FRESH_SECONDS = 1.0


class LeaseError(Exception):
    """A Lease request failed (network, timeout, an API error other than a conflict)."""


class LeaseConflict(LeaseError):
    """A Lease write lost a race: the Lease exists (create) or changed since it was read
    (update: stale ``metadata.resourceVersion``; HTTP 409)."""


class LeaseApi(Protocol):
    """The three Lease calls the elector makes; each takes a timeout in seconds."""

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The Lease object (API JSON), or None when it does not exist. Raises :class:`LeaseError`."""

    def create(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Create the Lease; returns it as stored. Raises :class:`LeaseConflict`, :class:`LeaseError`."""

    def update(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Replace the Lease, with its ``metadata.resourceVersion`` as the precondition;
        returns it as stored. Raises :class:`LeaseConflict`, :class:`LeaseError`."""


@dataclass(frozen=True)
class LeaderElection:
    """Where and how replicas elect the one that acts: a ``coordination.k8s.io/v1`` Lease
    ``namespace/name``, held for ``lease_seconds`` and renewed every ``retry_seconds``;
    a leader that has not renewed for ``renew_seconds`` stops writing and gives up (the
    renew deadline), as kube-controller-manager does with its defaults 15/10/2 s."""

    namespace: str
    name: str = "troupe-reconciler"
    lease_seconds: int = 15
    renew_seconds: int = 10
    retry_seconds: int = 2

    @classmethod
    def scaled(cls, namespace: str, name: str, lease_seconds: int) -> LeaderElection:
        """Renewal and retry scaled from a lease duration (15 s gives 10 s and 2 s).
        Raises ``ValueError`` naming the flag when the lease is shorter than 4 s."""
        if lease_seconds < 4:
            raise ValueError(f"--leader-elect-lease-seconds: must be at least 4, got {lease_seconds}")
        renew = max(2, lease_seconds * 2 // 3)
        retry = max(1, min(renew // 5, 2))
        return cls(namespace, name, lease_seconds, renew, retry)


def micro_time(epoch_seconds: float) -> str:
    """A ``MicroTime`` as the API writes it: RFC 3339, UTC, microseconds (``2026-11-23T09:30:00.000000Z``)."""
    return dt.datetime.fromtimestamp(epoch_seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(lease: Mapping[str, Any] | None) -> dict[str, Any]:
    spec = (lease or {}).get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


def _record(lease: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a change of the Lease is judged by (client-go compares the raw record)."""
    s = _spec(lease)
    return (s.get("holderIdentity"), s.get("leaseDurationSeconds"), s.get("acquireTime"), s.get("renewTime"),
            s.get("leaseTransitions"))


class Elector:
    """Campaigns for the Lease of ``election`` as ``identity`` (module docstring).

    ``on_started`` runs in a thread of its own once this replica leads (it may block, say
    until caches sync, while the renewals go on); ``on_stopped`` runs once it has lost the
    Lease (the fence is already closed then). ``clock`` is monotonic seconds, ``wall``
    seconds since the epoch (only written into the Lease, for people), ``wait(seconds)``
    sleeps and returns True when the elector should stop; tests inject all three.

    Thread-safe: :meth:`check` and :meth:`confirm` are called by the writers while the
    elector's own thread renews.
    """

    def __init__(
        self,
        api: LeaseApi,
        election: LeaderElection,
        identity: str,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.api, self.election, self.identity = api, election, identity
        self.on_started, self.on_stopped = on_started, on_stopped
        self.clock, self.wall = clock, wall
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._confirmed_at: float | None = None
        #: Held while a read-back of :meth:`confirm` is in flight (one at a time).
        self._reading = threading.Lock()
        self._leading = False
        self._ended = False
        self._stopped_called = False
        self._thread: threading.Thread | None = None
        #: Renewals that succeeded, and times this replica took the Lease (for tests and logs).
        self.renewals = 0
        self.acquisitions = 0

    # --- the fence ---------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        """Whether this replica leads and its fence is open now."""
        try:
            self.check()
        except LostLeadership:
            return False
        return True

    def check(self) -> None:
        """Raise :class:`~reconciler.ports.LostLeadership` unless this replica leads and
        sent its last successful renew less than ``renew_seconds`` ago. No I/O: cheap
        enough to call just before every request."""
        with self._lock:
            leading, renewed = self._leading, self._renewed_at
        if not leading or renewed is None:
            raise LostLeadership(f"{self.identity} does not hold the Lease "
                                 f"{self.election.namespace}/{self.election.name}")
        age = self.clock() - renewed
        if age >= self.election.renew_seconds:
            raise LostLeadership(f"{self.identity}: last renewal of the Lease {self.election.namespace}/"
                                 f"{self.election.name} {age:.1f}s ago, past the {self.election.renew_seconds}s "
                                 "renew deadline")

    def remaining(self) -> float:
        """Seconds until the fence closes (0.0 when it is closed): what is left of
        ``renew_seconds`` since the last successful renew was sent. A write's response is
        awaited at most this long (:func:`reconciler.kube.fence_connections`), so no write
        of this replica is still in flight when another may take over
        (docs/decisions/030-preemption-budgets-and-fences.md). No I/O."""
        with self._lock:
            leading, renewed = self._leading, self._renewed_at
        if not leading or renewed is None:
            return 0.0
        return max(0.0, renewed + self.election.renew_seconds - self.clock())

    def confirm(self) -> None:
        """:meth:`check`, then read the Lease back: this replica must still be its holder
        there (no one took it over, no one deleted or edited it). A read sent less than
        :data:`CONFIRM_FRESH_SECONDS` ago that found this replica the holder stands for this
        one (the fence is still checked). Raises
        :class:`~reconciler.ports.LostLeadership` otherwise, or when the read fails:
        a batch that cannot be confirmed does not start."""
        self.check()
        started = self.clock()
        if self._fresh(started):
            return
        with self._reading:  # one read-back at a time: confirmations that start meanwhile take its answer
            if self._fresh(started):
                self.check()
                return
            sent = self.clock()
            try:
                lease = self.api.get(self._request_timeout())
            except LeaseError as e:
                raise LostLeadership(f"{self.identity}: the Lease could not be read back: {e}") from e
            holder = _spec(lease).get("holderIdentity")
            if lease is None or holder != self.identity:
                self._lose(f"the Lease is held by {holder or 'no one'}" if lease is not None else "the Lease is gone")
                raise LostLeadership(f"{self.identity}: the Lease {self.election.namespace}/{self.election.name} is "
                                     f"now held by {holder or 'no one'}")
            self.check()
            with self._lock:
                self._confirmed_at = sent

    def _fresh(self, started: float) -> bool:
        """Whether a read-back sent less than :data:`CONFIRM_FRESH_SECONDS` before ``started``
        (monotonic seconds) found this replica the holder."""
        with self._lock:
            return self._confirmed_at is not None and started - self._confirmed_at < CONFIRM_FRESH_SECONDS

    # --- one step: client-go's tryAcquireOrRenew ---------------------------------------
    def _request_timeout(self) -> float:
        """What is left of the renew deadline while leading (else the full bound), seconds."""
        with self._lock:
            renewed = self._renewed_at if self._leading else None
        if renewed is None:
            return LEASE_REQUEST_SECONDS
        left = renewed + self.election.renew_seconds - self.clock()
        return max(MIN_REQUEST_SECONDS, min(LEASE_REQUEST_SECONDS, left))

    def _new_spec(self, current: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
        spec = _spec(current)
        mine = spec.get("holderIdentity") == self.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.election.lease_seconds,
            "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime") else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if mine or current is None else transitions + 1,
        }

    def _won(self, lease: dict[str, Any], sent_at: float) -> bool:
        """Record a successful write of the Lease; False (and nothing recorded as
        leading) once this elector has stopped leading for good."""
        with self._lock:
            if self._ended:
                self._lease = lease
                return False
            was = self._leading
            self._lease, self._observed, self._observed_at = lease, _record(lease), sent_at
            self._renewed_at, self._leading = sent_at, True
            self.renewals += was
            self.acquisitions += not was
        return True

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease; True when this replica holds it now.

        A leader first updates the Lease it last wrote, without reading it (client-go's
        optimistic renew: one request); on a conflict or an error it reads the Lease and
        decides again. A candidate takes the Lease when it does not exist, has no holder,
        or has not changed for its ``leaseDurationSeconds`` as measured on this replica's
        monotonic clock since it first saw that record.
        """
        sent_at, now = self.clock(), self.wall()
        timeout = self._request_timeout()
        with self._lock:
            if self._ended:
                return False
            cached = self._lease if self._leading else None
        if cached is not None:
            body = {**cached, "spec": self._new_spec(cached, now)}
            try:
                return self._won(self.api.update(body, timeout), sent_at)
            except LeaseError as e:
                log.info("optimistic renewal of the Lease failed (%s): reading it", e)
        try:
            lease = self.api.get(timeout)
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.election.name, "namespace": self.election.namespace},
                        "spec": self._new_spec(None, now)}
                return self._won(self.api.create(body, timeout), sent_at)
            spec, record = _spec(lease), _record(lease)
            with self._lock:
                if record != self._observed:
                    self._observed, self._observed_at = record, self.clock()
                observed_at = self._observed_at
            holder = spec.get("holderIdentity")
            duration = spec.get("leaseDurationSeconds") or self.election.lease_seconds
            if holder and holder != self.identity:
                with self._lock:
                    was_leading = self._leading
                if was_leading:
                    self._lose(f"the Lease is held by {holder}")
                    return False
                if self.clock() < observed_at + float(duration):
                    with self._lock:
                        self._lease = lease
                    return False
            return self._won(self.api.update({**lease, "spec": self._new_spec(lease, now)}, timeout), sent_at)
        except LeaseError as e:
            log.info("Lease %s/%s: %s", self.election.namespace, self.election.name, e)
            return False

    # --- the loops ---------------------------------------------------------------------
    def _lose(self, why: str) -> bool:
        """Close the fence for good (a replica that stopped leading never leads again: it
        exits and restarts as a follower); True if it was open."""
        with self._lock:
            was, self._leading, self._confirmed_at = self._leading, False, None
            self._ended = self._ended or was or self._stop.is_set()
        if was:
            log.error("%s stops leading: %s", self.identity, why)
        return was

    def _stopped(self) -> None:
        """Call ``on_stopped``, once."""
        with self._lock:
            if self._stopped_called:
                return
            self._stopped_called = True
        self.on_stopped()

    def _acquire(self) -> bool:
        while True:
            if self.try_acquire_or_renew():
                return True
            if self.wait(self.election.retry_seconds * (1 + random.random() * JITTER)):
                return False

    def _renew_until_lost(self) -> str:
        """Renew every ``retry_seconds``; returns why it stopped: the renew deadline
        passed, or ``""`` when asked to stop."""
        retry, deadline_after = self.election.retry_seconds, self.election.renew_seconds
        while not self.wait(retry):
            while True:
                with self._lock:
                    renewed, leading = self._renewed_at, self._leading
                if not leading:
                    return "the Lease was found taken by another replica"
                if renewed is None or self.clock() >= renewed + deadline_after:
                    return f"no renewal of the Lease within the {deadline_after}s renew deadline"
                if self.try_acquire_or_renew():
                    break
                if self.wait(min(retry, max(0.0, renewed + deadline_after - self.clock()))):
                    return ""
        return ""

    def run(self) -> None:
        """Campaign, lead, renew; returns once the Lease is lost or :meth:`stop` was called.
        Calls ``on_stopped`` when the Lease was lost (not after a stop)."""
        if not self._acquire():
            return
        log.info("%s holds the Lease %s/%s", self.identity, self.election.namespace, self.election.name)
        threading.Thread(target=self._started, name="leading", daemon=True).start()
        why = self._renew_until_lost()
        if why and not self._stop.is_set():
            self._lose(why)
            self._stopped()

    def _started(self) -> None:
        try:
            self.on_started()
        except Exception:
            log.exception("starting to lead failed: giving the Lease up")
            self._lose("starting to lead failed")
            self._stopped()

    def start(self) -> Elector:
        """Run :meth:`run` in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop campaigning or renewing (the fence closes at once), without releasing."""
        self._stop.set()
        self._lose("stopping")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=LEASE_REQUEST_SECONDS + 1)

    def release(self) -> bool:
        """Stop, then give the Lease up if this replica still holds it (client-go's
        ``release``: no holder, a 1 s duration, the transitions kept), so the next leader
        takes over at its next retry. Call it only once nothing writes any more. Returns
        True when the Lease was given up. Never raises."""
        self.stop()
        with self._lock:
            lease = self._lease if self._renewed_at is not None else None
        if lease is None or _spec(lease).get("holderIdentity") != self.identity:
            return False
        now = self.wall()
        spec = {**_spec(lease), "holderIdentity": None, "leaseDurationSeconds": 1,
                "acquireTime": micro_time(now), "renewTime": micro_time(now)}
        try:
            self.api.update({**lease, "spec": spec}, LEASE_REQUEST_SECONDS)
        except LeaseError as e:
            log.warning("the Lease %s/%s was not released (%s): the next leader waits for it to expire",
                        self.election.namespace, self.election.name, e)
            return False
        log.info("%s released the Lease %s/%s", self.identity, self.election.namespace, self.election.name)
        return True
