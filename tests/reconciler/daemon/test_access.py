"""Who reads the reconciler's pages of gangs (reconciler.daemon.access,
docs/decisions/049-hostile-tenants-third-round.md): the bearer token is reviewed by the API
server, the answers kept for a minute, the namespaces one caller may have reviewed bounded,
and an API server that cannot answer is a 503, never an open door."""

from __future__ import annotations

import pytest

from reconciler.daemon.access import MAX_TOKEN_LENGTH, Access, Caller, Denied
from tests.support.probes import Reviews


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_request_without_a_bearer_token_or_with_an_unknown_one_is_401():
    access = Access(Reviews())
    for header in (None, "", "Basic YWRtaW46YWRtaW4=", "Bearer ", "Bearer unknown", "Bearer " + "x" * (MAX_TOKEN_LENGTH + 1)):
        with pytest.raises(Denied) as e:
            access.scope(header)
        assert e.value.status == "401 Unauthorized", header


def test_who_may_list_every_namespaces_pods_sees_everything_and_others_only_their_namespaces():
    reviews = Reviews({"a": "admin", "t": "alice"}, {"admin": {""}, "alice": {"team-a"}})
    access = Access(reviews)
    assert access.scope("Bearer a").everything
    alice = access.scope("bearer t")  # the scheme is case-insensitive (RFC 7235)
    assert not alice.everything and alice.caller == Caller("alice")
    assert alice.sees("team-a") and not alice.sees("team-b")


def test_answers_are_kept_for_the_ttl_and_asked_again_after():
    reviews, clock = Reviews({"t": "alice"}, {"alice": {"team-a"}}), Clock()
    access = Access(reviews, ttl=60, clock=clock)
    for _ in range(3):
        assert access.scope("Bearer t").sees("team-a")
    assert reviews.asked == [("token", "t"), ("alice", ""), ("alice", "team-a")]
    clock.now += 60
    access.scope("Bearer t").sees("team-a")
    assert len(reviews.asked) == 6


def test_one_caller_has_at_most_so_many_namespaces_reviewed_a_minute():
    reviews, clock = Reviews({"t": "alice"}, {"alice": {f"ns-{i}" for i in range(10)}}), Clock()
    access = Access(reviews, clock=clock, max_namespace_reviews=3)
    scope = access.scope("Bearer t")
    assert [scope.sees(f"ns-{i}") for i in range(5)] == [True, True, True, False, False]
    assert scope.sees("ns-0"), "an answer kept is still given"
    clock.now += 60
    assert access.scope("Bearer t").sees("ns-3")


def test_an_api_server_that_cannot_answer_is_a_503_and_nothing_is_kept():
    class Failing(Reviews):
        def authenticate(self, token: str) -> Caller | None:
            raise OSError("connection refused")

    access = Access(Failing())
    with pytest.raises(Denied) as e:
        access.scope("Bearer t")
    assert e.value.status == "503 Service Unavailable" and "connection refused" in str(e.value)
    assert access.asked == 0


def test_the_answers_kept_are_bounded():
    reviews = Reviews({f"t{i}": f"u{i}" for i in range(50)}, {})
    access = Access(reviews, max_entries=10)
    for i in range(50):
        access.scope(f"Bearer t{i}")
    assert len(access._answers) == 10


#: The key of ``status.user.extra`` that narrows an OpenShift OAuth token to its scopes
#: (``user:info`` may read who the user is and nothing else).
SCOPES = "scopes.authorization.openshift.io"
#: The key kube-apiserver puts the credential a token is (a service account token's JTI) under.
CREDENTIAL = "authentication.kubernetes.io/credential-id"


class ScopedReviews(Reviews):
    """An authorizer that, as OpenShift's scope authorizer does, lets a token narrowed to
    ``user:info`` list no pods, whatever its user may do; records the whole caller asked about."""

    def __init__(self, tokens: dict[str, Caller]) -> None:
        super().__init__(tokens, {"alice": {""}})
        self.reviewed: list[tuple[Caller, str]] = []

    def may_list_pods(self, caller: Caller, namespace: str) -> bool:
        self.reviewed.append((caller, namespace))
        if "user:info" in dict(caller.extra).get(SCOPES, ()):
            return False
        return super().may_list_pods(caller, namespace)


def test_a_token_narrowed_by_its_extra_is_reviewed_for_itself_not_given_the_full_tokens_answer():
    """The answers are kept by the whole review the API server is asked (user, uid, groups
    and extra), as its own webhook authorizer keys its cache: a scoped token of a user whose
    full token was just reviewed is asked about on its own (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md)."""
    groups = ("system:authenticated:oauth", "system:authenticated")
    full = Caller("alice", "uid-alice", groups)
    scoped = Caller("alice", "uid-alice", groups, {SCOPES: ("user:info",)})
    reviews = ScopedReviews({"full": full, "scoped": scoped})
    access = Access(reviews)
    assert access.scope("Bearer full").everything

    narrowed = access.scope("Bearer scoped")

    assert not narrowed.everything and not narrowed.sees("team-a")
    assert reviews.reviewed == [(full, ""), (scoped, ""), (scoped, "team-a")], "each review asked once, for its own caller"
    assert access.scope("Bearer full").everything and access.scope("Bearer scoped").sees("team-a") is False
    assert len(reviews.reviewed) == 3, "and each kept for the minute"


def test_two_credentials_of_one_user_are_reviewed_apart_and_share_its_namespace_budget():
    """Two tokens of one service account differ by their credential id (``extra``): each is
    a review of its own, while the namespaces reviewed for the user stay bounded as one."""
    sa = "system:serviceaccount:team-a:reader"
    one = Caller(sa, "uid-sa", ("system:serviceaccounts",), {CREDENTIAL: ("JTI=1",)})
    two = Caller(sa, "uid-sa", ("system:serviceaccounts",), {CREDENTIAL: ("JTI=2",)})
    reviews = ScopedReviews({"one": one, "two": two})
    reviews.pods = {sa: {f"ns-{i}" for i in range(10)}}
    access = Access(reviews, max_namespace_reviews=3)
    first = access.scope("Bearer one")
    assert [first.sees(f"ns-{i}") for i in range(2)] == [True, True]

    second = access.scope("Bearer two")

    assert [second.sees(f"ns-{i}") for i in range(3)] == [True, False, False], "one review left for the user"
    assert [c for c, ns in reviews.reviewed if ns] == [one, one, two]
    assert one != two and one == Caller(sa, "uid-sa", ("system:serviceaccounts",), {CREDENTIAL: ["JTI=1"]})
