"""The reconciler's HTTP server (``/metrics``, ``/healthz``, ``/readyz``, ``/topology/``) on a
free 127.0.0.1 port for a test, over a :class:`~reconciler.run.reconciler.Reconciler` that
starts nothing, with the API server's reviews of its callers played by :class:`Reviews`; and
a plain GET of it."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

from reconciler.daemon.access import Access, Caller
from reconciler.run.probes import Health, serve_http
from reconciler.run.reconciler import Reconciler

#: The token of a caller who may list every namespace's pods.
ADMIN = "admin-token"


class Reviews:
    """The API server's answers, as a table: ``tokens`` maps a bearer token to its user (a
    user name, or the whole :class:`Caller` a TokenReview would give), ``pods`` a user name
    to the namespaces whose pods it may list (``""``: every namespace). Records every
    question in ``asked``."""

    def __init__(self, tokens: Mapping[str, str | Caller] | None = None,
                 pods: Mapping[str, set[str]] | None = None) -> None:
        self.tokens = dict(tokens if tokens is not None else {ADMIN: "admin"})
        self.pods = dict(pods if pods is not None else {"admin": {""}})
        self.asked: list[tuple[str, str]] = []

    def authenticate(self, token: str) -> Caller | None:
        self.asked.append(("token", token))
        user = self.tokens.get(token)
        return Caller(user) if isinstance(user, str) else user

    def may_list_pods(self, caller: Caller, namespace: str) -> bool:
        self.asked.append((caller.username, namespace))
        return namespace in self.pods.get(caller.username, set())


@contextlib.contextmanager
def serving(reconciler: Reconciler, reviews: Reviews | None = None) -> Iterator[tuple[Health, int]]:
    """Serve ``reconciler`` as the leader, its callers reviewed by ``reviews`` (default: the
    :data:`ADMIN` token sees everything); yields its :class:`Health` and the port. Stops the
    server and the reconciler's writer ports on exit."""
    health = Health()
    health.role, health.reconciler = "leader", reconciler
    server = serve_http("127.0.0.1", 0, health, Access(reviews if reviews is not None else Reviews()))
    try:
        yield health, server.server_port
    finally:
        server.shutdown()
        server.server_close()
        reconciler.writes.close()


def get(port: int, path: str, token: str | None = ADMIN) -> tuple[int, str]:
    """``(status, body)`` of a GET of ``path`` on the server at ``port`` (errors included),
    with ``token`` as the bearer token (None: no ``Authorization`` header)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
