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
