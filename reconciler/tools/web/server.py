"""Serving the topology map: the page's three static files (shipped in this package's
``static/``) and its data, under :data:`PREFIX`, as a WSGI app the reconciler's HTTP server
mounts (:mod:`reconciler.run.probes`) and ``kubectl troupe topology --web`` serves
on its own (:mod:`reconciler.tools.web.local`).

Paths, relative to :data:`PREFIX` so that the page works behind a proxy that adds a prefix
(``kubectl proxy``): ``/topology/`` the page, ``map.css``, ``map.js``, ``data.json`` (the
data, :func:`reconciler.tools.web.data.page`); ``/topology`` redirects to ``/topology/``.
Every response is read-only (GET and HEAD; anything else is refused with 405).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any

import orjson

from reconciler.daemon.access import Denied
from reconciler.tools.web.data import visible

#: Where the page lives on a server.
PREFIX = "/topology"
#: File name -> content type of the page's static files.
STATIC = {"index.html": "text/html; charset=utf-8", "map.css": "text/css; charset=utf-8",
          "map.js": "text/javascript; charset=utf-8"}
#: Where ``/topology`` and ``/`` send a browser: relative, so a proxy's prefix stays.
REDIRECT = PREFIX.lstrip("/").encode() + b"/"
#: Seconds the data of one computation is served again before it is computed anew.
CACHE_SECONDS = 3.0

Response = tuple[str, str, bytes]


def static_file(name: str) -> bytes:
    """The bytes of one of the page's static files (:data:`STATIC`), read from the package."""
    return resources.files("reconciler.tools.web").joinpath("static").joinpath(name).read_bytes()


def encode(data: Mapping[str, Any]) -> bytes:
    """The data as the page reads it: compact JSON with ``mapDigest``, a digest of its
    ``tree``, so the page draws the map again only when the tree changed."""
    tree = orjson.dumps(data.get("tree"), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.blake2b(tree, digest_size=8).hexdigest()
    return orjson.dumps({**data, "mapDigest": digest})


class CachedData:
    """The page's data, made by ``produce()`` (the JSON object of
    :func:`reconciler.tools.web.data.page`) at most once every ``ttl`` seconds: requests
    within ``ttl`` of the last computation are served its bytes, and concurrent requests
    wait for one computation instead of making their own. An exception of ``produce`` is
    served as a 503 with ``{"error": str(e)}`` (and not kept)."""

    def __init__(self, produce: Callable[[], Mapping[str, Any]], ttl: float = CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.produce = produce
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, bytes] | None = None
        #: Seconds the last computation took (produce and encode), for the logs and benchmarks.
        self.last_seconds = 0.0

    def put(self, data: Mapping[str, Any]) -> None:
        """Serve ``data`` (made by the caller) as the last computation, from now."""
        body = encode(data)
        with self._lock:
            self._last = (self.clock(), body)

    def get(self) -> tuple[bool, bytes]:
        """``(ok, body)``: the data's JSON, or the error's."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last[0] < self.ttl:
                return True, self._last[1]
            start = time.perf_counter()
            try:
                body = encode(self.produce())
            except Exception as e:  # noqa: BLE001 - served to the page, which shows it and keeps its map
                return False, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
            self.last_seconds = time.perf_counter() - start
            self._last = (self.clock(), body)
            return True, body


#: What a server that checks its callers asks of a request for the data: None when the caller
#: sees everything, else which namespaces it sees; raises
#: :class:`~reconciler.daemon.access.Denied` when it may see nothing.
Scope = Callable[[Mapping[str, Any]], Callable[[str], bool] | None]


def denied(e: Denied) -> Response:
    """The response to a request :class:`~reconciler.daemon.access.Denied` names: its
    status, ``{"error": why}``."""
    return e.status, "application/json", json.dumps({"error": str(e)}).encode()


def respond(path: str, method: str, data: CachedData, environ: Mapping[str, Any] | None = None,
            scope: Scope | None = None) -> Response | None:
    """``(status, content type, body)`` for a request of ``path`` under :data:`PREFIX`,
    None for any other path (the caller's). ``/topology`` redirects: its status is a 301
    whose body is the location (:data:`REDIRECT`). With ``scope``, the data answers only a
    caller ``scope(environ)`` lets in, with what it may see (:func:`~.data.visible`); the
    page's static files hold no data and answer anyone."""
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        return None
    if method not in ("GET", "HEAD"):
        return "405 Method Not Allowed", "text/plain", b"read-only: GET or HEAD\n"
    if path == PREFIX:
        return "301 Moved Permanently", "text/plain", REDIRECT
    name = path[len(PREFIX) + 1:] or "index.html"
    if name == "data.json":
        try:
            sees = scope(environ or {}) if scope is not None else None
        except Denied as e:
            return denied(e)
        ok, body = data.get()
        if ok and sees is not None:
            body = encode(visible(orjson.loads(body), sees))
        return ("200 OK" if ok else "503 Service Unavailable"), "application/json", body
    if name in STATIC:
        return "200 OK", STATIC[name], static_file(name)
    return "404 Not Found", "text/plain", b"not found\n"


def wsgi(data: CachedData, fallback: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]] | None = None,
         scope: Scope | None = None) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app serving the page under :data:`PREFIX` (:func:`respond`, ``scope`` as
    there) and passing any other path to ``fallback`` (default: ``/`` redirects to the
    page, the rest is 404). A 401 carries ``WWW-Authenticate: Bearer``."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        found = respond(path, method, data, environ, scope)
        if found is None and fallback is not None:
            return fallback(environ, start_response)
        if found is None:
            found = ("301 Moved Permanently", "text/plain", REDIRECT) if path == "/" else (
                "404 Not Found", "text/plain", b"not found\n")
        status, ctype, body = found
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                   ("X-Content-Type-Options", "nosniff")]
        if status.startswith("301"):
            headers.append(("Location", body.decode()))
        if status.startswith("401"):
            headers.append(("WWW-Authenticate", 'Bearer realm="troupe"'))
        start_response(status, headers)
        return [b"" if method == "HEAD" else body]

    return app
