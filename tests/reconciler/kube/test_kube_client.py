"""The shared plumbing of reconciler.kube: the one pager of list requests, and the reading
of an API error (the client's construction and fence: test_fencing.py)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from reconciler.kube.client import (
    LIST_PAGE,
    REQUEST_TIMEOUT,
    RateLimiter,
    error_message,
    list_pages,
)


class Response:
    """What a list function returns with ``_preload_content=False``: the page's bytes."""

    def __init__(self, body):
        self.data = json.dumps(body).encode()


class PagedList:
    """A list function serving ``pages`` (lists of names) one request at a time, each page
    but the last with a continue token naming the next; records every request's arguments."""

    def __init__(self, *pages):
        self.pages = pages
        self.requests = []

    def __call__(self, **kwargs):
        self.requests.append(kwargs)
        index = int(kwargs["_continue"] or 0)
        meta = {"resourceVersion": "7"}
        if index + 1 < len(self.pages):
            meta["continue"] = str(index + 1)
        return Response({"items": [{"metadata": {"name": n}} for n in self.pages[index]], "metadata": meta})


def decode(data):
    body = json.loads(data)
    return body["items"], body["metadata"]


def names(page):
    return [item["metadata"]["name"] for item in page[0]]


def test_the_pager_follows_the_continue_tokens_to_the_last_page():
    server = PagedList(["a", "b"], ["c"], ["d"])
    pages = list(list_pages(server, decode))
    assert [names(p) for p in pages] == [["a", "b"], ["c"], ["d"]]
    assert [r["_continue"] for r in server.requests] == [None, "1", "2"]
    assert pages[-1][1] == {"resourceVersion": "7"}, "the last page carries no token"
    assert all(r["limit"] == LIST_PAGE and r["_preload_content"] is False and r["_request_timeout"] == REQUEST_TIMEOUT
               for r in server.requests)


def test_the_pager_fetches_a_page_only_when_the_one_before_is_consumed():
    server = PagedList(["a"], ["b"], ["c"])
    pages = list_pages(server, decode)
    assert server.requests == [], "nothing is fetched before the first page is asked for"
    assert names(next(pages)) == ["a"] and len(server.requests) == 1
    assert names(next(pages)) == ["b"] and len(server.requests) == 2


def test_the_pager_asks_for_the_start_version_on_the_first_page_only_and_passes_selectors_on_every_page():
    server = PagedList(["a"], ["b"])
    list(list_pages(server, decode, start_version="0", field_selector="status.phase!=Failed"))
    assert [r.get("resource_version") for r in server.requests] == ["0", None]
    assert "resource_version" not in server.requests[1], "a continued page is read at the token's version"
    assert [r["field_selector"] for r in server.requests] == ["status.phase!=Failed"] * 2


def test_the_pager_without_a_start_version_asks_for_none():
    server = PagedList(["a"])
    list(list_pages(server, decode))
    assert "resource_version" not in server.requests[0]


def api_error(status, body=None, reason="Reason"):
    e = ApiException(status=status, reason=reason)
    e.body = body
    return e


def test_an_api_error_is_read_from_its_status_message_else_its_body_else_its_reason():
    assert error_message(api_error(403, b'{"kind": "Status", "message": "pods is forbidden"}')) == "pods is forbidden"
    assert error_message(api_error(409, '{"kind": "Status"}')) == '{"kind": "Status"}'
    assert error_message(api_error(502, b"<html>bad gateway</html>")) == "<html>bad gateway</html>"
    assert error_message(api_error(500, None, reason="Internal Server Error")) == "Internal Server Error"


def test_the_rate_limiter_lets_a_burst_through_at_once():
    limiter = RateLimiter(qps=1, burst=3)
    for _ in range(3):
        limiter.wait()  # a fourth would sleep a second
    assert (limiter.qps, limiter.burst) == (1, 3)
