"""Who may read the reconciler's pages of gangs (``/debug/gangs``, ``/topology/data.json``),
and which namespaces of them (docs/decisions/049-hostile-tenants-third-round.md).

The pages name every namespace's gangs, their reasons, pods and nodes, so they answer only an
authenticated, authorized caller, as kube-rbac-proxy and KueueViz do: the request carries a
bearer token (``Authorization: Bearer <token>``), the API server says whose it is (a
TokenReview), and the caller sees a namespace only if it may ``list`` the namespace's pods
(a SubjectAccessReview, the question ``kubectl auth can-i list pods -n NS --as CALLER``
asks). A caller who may list pods in every namespace sees everything.

:class:`Access` asks the API server through a :class:`Reviews` port
(:class:`reconciler.kube.access.KubeReviews` implements it) and keeps every answer for
:data:`TTL_SECONDS`, so an open page that reads its data every few seconds costs one
review a minute; it keeps at most :data:`MAX_ENTRIES` answers (the oldest go first), and
reviews at most :data:`MAX_NAMESPACE_REVIEWS` namespaces of one user a minute (one who may
not list every namespace's pods sees the namespaces reviewed so far).

An answer is kept for the whole review it answers: the caller's name, uid, groups and
``extra`` (:class:`Caller`, compared whole), as kube-apiserver's webhook authorizer keys
its cache by the whole SubjectAccessReview spec. ``extra`` narrows what a token may do
(an OpenShift token scoped to ``user:info`` carries ``scopes.authorization.openshift.io``;
an authorizer may decide by ``authentication.kubernetes.io/credential-id``), so a token of
the same user with another ``extra`` is reviewed on its own, never given the answer its
user's full token got (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

#: Seconds an answer of the API server (who a token is, what a caller may do) is kept.
TTL_SECONDS = 60.0
#: Answers kept at most (tokens and namespace reviews together).
MAX_ENTRIES = 4096
#: Namespaces of one caller reviewed at most per :data:`TTL_SECONDS`.
MAX_NAMESPACE_REVIEWS = 200
#: The longest bearer token read, in characters (a service account token is about 1 KB).
MAX_TOKEN_LENGTH = 16384


@dataclass(frozen=True)
class Caller:
    """Whom a token authenticates, as a TokenReview says (``status.user``): ``username``,
    ``uid``, ``groups`` and ``extra`` (key -> values, read-only once made; values given as
    any sequence are kept as tuples). Two callers are equal only when all four are (module
    docstring); the hash leaves ``extra`` out, which equality still compares."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", MappingProxyType({k: tuple(v) for k, v in self.extra.items()}))

    @property
    def identity(self) -> tuple[str, str, tuple[str, ...]]:
        """``(username, uid, groups)``: the user, whatever its token's ``extra`` narrows; the
        namespaces reviewed a minute are counted per user."""
        return (self.username, self.uid, self.groups)


class Reviews(Protocol):
    """The API server's two answers :class:`Access` needs."""

    def authenticate(self, token: str) -> Caller | None:
        """Whom ``token`` authenticates (a TokenReview), or None when it authenticates no
        one. Raises ``OSError`` (or any exception) when the API server cannot answer."""

    def may_list_pods(self, caller: Caller, namespace: str) -> bool:
        """Whether ``caller`` may ``list`` pods in ``namespace`` (``""``: in every
        namespace), as a SubjectAccessReview answers. Raises as :meth:`authenticate`."""


class Denied(Exception):
    """A request that may not read the pages: ``status`` (``401 Unauthorized``,
    ``403 Forbidden`` or ``503 Service Unavailable``) and why, for the response."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclass(frozen=True)
class Scope:
    """What one caller may see: ``everything``, or the namespaces ``sees`` says yes to."""

    caller: Caller
    everything: bool
    sees: Callable[[str], bool]


class Access:
    """The answers of ``reviews``, kept for ``ttl`` seconds (module docstring). ``clock``:
    monotonic seconds. Thread-safe: the HTTP server answers on a thread per connection."""

    def __init__(self, reviews: Reviews, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = MAX_ENTRIES, max_namespace_reviews: int = MAX_NAMESPACE_REVIEWS) -> None:
        self.reviews, self.ttl, self.clock = reviews, ttl, clock
        self.max_entries, self.max_namespace_reviews = max_entries, max_namespace_reviews
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[object, ...], tuple[float, object]] = OrderedDict()
        self._reviewed: dict[tuple[str, str, tuple[str, ...]], tuple[float, int]] = {}
        #: Reviews asked of the API server since start (TokenReviews and SubjectAccessReviews).
        self.asked = 0

    def _kept(self, key: tuple[object, ...], ask: Callable[[], object]) -> object:
        now = self.clock()
        with self._lock:
            found = self._answers.get(key)
            if found is not None and now - found[0] < self.ttl:
                return found[1]
        try:
            answer = ask()
        except Exception as e:  # any failure of the API server is the caller's 503
            raise Denied("503 Service Unavailable", f"the API server could not review the request: {e}") from e
        with self._lock:
            self.asked += 1
            self._answers[key] = (now, answer)
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)
        return answer

    def caller(self, authorization: str | None) -> Caller:
        """The caller of a request whose ``Authorization`` header is ``authorization``.
        Raises :class:`Denied` (401 without a bearer token or with one that authenticates
        no one; 503 when the API server cannot answer)."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_LENGTH:
            raise Denied("401 Unauthorized", "a bearer token is needed (Authorization: Bearer <token>)")
        found = self._kept(("token", token), lambda: self.reviews.authenticate(token))
        if not isinstance(found, Caller):
            raise Denied("401 Unauthorized", "the bearer token authenticates no one")
        return found

    def scope(self, authorization: str | None) -> Scope:
        """What the caller of a request may see (module docstring). Raises :class:`Denied`
        as :meth:`caller`."""
        caller = self.caller(authorization)
        if self._kept(("pods", caller, ""), lambda: self.reviews.may_list_pods(caller, "")):
            return Scope(caller, True, lambda namespace: True)

        def sees(namespace: str) -> bool:
            key = ("pods", caller, namespace)
            now = self.clock()
            with self._lock:
                found = self._answers.get(key)
                if found is not None and now - found[0] < self.ttl:
                    return bool(found[1])
                since, count = self._reviewed.get(caller.identity, (now, 0))
                if now - since >= self.ttl:
                    since, count = now, 0
                if count >= self.max_namespace_reviews:
                    return False
                self._reviewed[caller.identity] = (since, count + 1)
                if len(self._reviewed) > self.max_entries:  # callers of tokens long expired
                    self._reviewed = {c: v for c, v in self._reviewed.items() if now - v[0] < self.ttl}
            return bool(self._kept(key, lambda: self.reviews.may_list_pods(caller, namespace)))

        return Scope(caller, False, sees)
