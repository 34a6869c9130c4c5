"""``kubectl troupe topology --web``: the topology map served on 127.0.0.1 from a snapshot
file or the live cluster, decided by the plugin as ``kubectl troupe status`` decides.

:func:`cluster_page` is the page data of a :class:`~reconciler.tools.views.Cluster`;
:func:`serve` reads once (bad input ends it before anything is served), serves the page on
``127.0.0.1:port`` (0: a free port), prints its address, opens a browser unless told not
to, and reads again when the page asks for data and the last read is older than
:data:`~reconciler.tools.web.server.CACHE_SECONDS` (a snapshot file: only when the file
changed; a live cluster: only when its watches saw a change,
:mod:`reconciler.tools.web.watched`), until interrupted.

The page shows every namespace's gangs, pods and nodes that the user's credentials read, so
only that user's browser may read it (:func:`guarded`, docs/decisions/049-hostile-tenants-third-round.md):
a request must name this server by its own address in ``Host`` (a page of another site that
rebinds its DNS name to 127.0.0.1 sends its own name) and carry the random token of the
address printed, in the URL once (it is then kept in a cookie for this address only) or in
that cookie, as Jupyter guards its local server.
"""

from __future__ import annotations

import gc
import hmac
import os
import secrets
import socketserver
import sys
import threading
import webbrowser
from collections.abc import Callable, Hashable, Mapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from reconciler.tools import views
from reconciler.tools.web import data, server


def cluster_page(cluster: views.Cluster, resource: str, refresh_seconds: float) -> dict[str, Any]:
    """The page data (:func:`reconciler.tools.web.data.page`) of ``cluster``: its topology
    tree (:func:`views.topology`), every gang's status as ``kubectl troupe status -o json``
    gives it (plus ``gang``, its key, ``nodes``: :func:`planned_nodes`, and for a gang that
    capacity is held for, :func:`~reconciler.tools.web.data.held_row`'s fields), the nodes
    held for gangs that have not started on them (``reserved``, ``nominated``, and ``held``:
    the holds of the same decisions, :func:`~reconciler.tools.web.data.held_marks`) and what
    pods outside any gang take of each node."""
    tree = views.topology(cluster, resource)
    statuses = views.status(cluster)
    holds = [s.outcome.hold for s in statuses if s.outcome is not None and s.outcome.hold is not None]
    rows = [{"gang": s.gang.key, **s.to_json(), **planned_nodes(s), **held_of(s)} for s in statuses]
    gangs = views.gang_of_pods(cluster)
    marks = data.with_marks(data.node_marks(cluster.snapshot, gangs), data.held_marks(holds))
    return data.page(tree, rows, marks, data.node_room(cluster.snapshot, gangs), resource=resource, levels=cluster.config.topology_levels,
                     source=cluster.source, at=cluster.now, refresh_seconds=refresh_seconds)


def planned_nodes(status: views.GangStatus) -> dict[str, list[str]]:
    """``{"nodes": [...]}``: the sorted nodes the decision of a gang places members on (its
    plan, ``status --output json``'s placements of a Placed gang) or its reservation names,
    so the page can show a gang that has not started yet; ``{}`` when there are none."""
    outcome = status.outcome
    if outcome is None:
        return {}
    nodes = {str(p["node"]) for p in outcome.placements if outcome.placed and p.get("node")}
    nodes |= {str(n) for n in (outcome.reservation or {}).get("nodes") or () if n}
    return {"nodes": sorted(nodes)} if nodes else {}


def held_of(status: views.GangStatus) -> dict[str, Any]:
    """:func:`~reconciler.tools.web.data.held_row` of the capacity the decision of a waiting
    gang holds for it (the simulator's outcome, :attr:`~reconciler.tools.simulate.GangOutcome.hold`);
    ``{}`` when none."""
    hold = status.outcome.hold if status.outcome is not None else None
    return data.held_row(hold) if hold is not None else {}


class QuietHandler(WSGIRequestHandler):
    """A request handler that logs nothing and lets a connection idle :attr:`timeout`
    seconds at most (its socket's timeout: a client that opens connections and sends
    nothing does not hold the server's threads)."""

    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server answering each request on a thread of its own."""

    daemon_threads = True


def reader(read: Callable[[], views.Cluster], resource: str, refresh_seconds: float,
           snapshot: str | None, stamp: Callable[[], Hashable] | None = None) -> Callable[[], Mapping[str, Any]]:
    """What the page's data is made by: ``read()`` and :func:`cluster_page`, again on each
    call; for a ``snapshot`` file (not ``-``), the last answer as long as the file's
    modification time and size are the same; for stdin, the first answer; with ``stamp`` (a
    live cluster kept by watches: :meth:`~reconciler.tools.web.watched.WatchedCluster.stamp`),
    the last answer as long as ``stamp()`` is the same (taken before the read, so a change
    during one is seen by the next call)."""
    last: list[Any] = [None, None]

    def produce() -> Mapping[str, Any]:
        mark: Hashable = None
        if snapshot and snapshot != "-":
            st = os.stat(snapshot)
            mark = (st.st_mtime_ns, st.st_size)
        elif snapshot == "-":
            mark = "stdin"
        elif stamp is not None:
            mark = stamp()
        if mark is not None and last[0] == mark and last[1] is not None:
            return last[1]  # type: ignore[no-any-return]
        page = cluster_page(read(), resource, refresh_seconds)
        gc.unfreeze()  # the plugin's read froze what it made; a later read makes it garbage
        last[:] = [mark, page]
        return page

    return produce


#: The cookie that carries the token once the printed address was opened.
COOKIE = "troupe-map-token"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


def guarded(app: WSGIApp, port: int, token: str) -> WSGIApp:
    """``app`` answered only to requests that name ``127.0.0.1:port`` or ``localhost:port``
    in ``Host`` (403 otherwise: DNS rebinding) and carry ``token`` as the ``token`` query
    parameter or the :data:`COOKIE` cookie (401 otherwise). A request with the right token in
    its URL gets the cookie (``HttpOnly``, ``SameSite=Strict``, for this address), so the
    page's own requests (its script, its data) need no token of their own."""
    hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
    wanted = token.encode()

    def deny(start_response: Callable[..., Any], status: str, why: str) -> list[bytes]:
        body = (why + "\n").encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store")])
        return [body]

    def app_guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("HTTP_HOST", "") not in hosts:
            return deny(start_response, "403 Forbidden", "this server answers only to 127.0.0.1 and localhost")
        given = parse_qs(environ.get("QUERY_STRING", "")).get("token", [""])[0]
        cookie = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        kept = cookie[COOKIE].value if COOKIE in cookie else ""
        if hmac.compare_digest(given.encode(), wanted):
            def with_cookie(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
                headers = [*headers, ("Set-Cookie", f"{COOKIE}={token}; Path={server.PREFIX}; HttpOnly; "
                                                    "SameSite=Strict")]
                return start_response(status, headers, *rest)
            return app(environ, with_cookie)
        if kept and hmac.compare_digest(kept.encode(), wanted):
            return app(environ, start_response)
        return deny(start_response, "401 Unauthorized",
                    "open the address kubectl troupe topology --web printed: it carries this server's token")

    return app_guarded


def serve(produce: Callable[[], Mapping[str, Any]], port: int, open_browser: bool,
          out: Any = None) -> int:
    """Serve the page from ``produce`` (:func:`reader`) on ``127.0.0.1:port`` until
    interrupted, to the holder of a random token only (:func:`guarded`); returns 0
    (``KeyboardInterrupt`` reaches the caller, after the server is closed). The first
    computation is made before serving, so that its errors reach the caller. Prints
    ``Serving the topology map at URL`` on ``out`` (default stdout), the URL carrying the
    token."""
    out = out or sys.stdout
    cached = server.CachedData(produce)
    first = produce()  # raises for bad input: nothing served
    cached.put(first)
    token = secrets.token_urlsafe(24)
    httpd = make_server("127.0.0.1", port, server.wsgi(cached), server_class=ThreadingServer, handler_class=QuietHandler)
    httpd.set_app(guarded(server.wsgi(cached), httpd.server_port, token))
    url = f"http://127.0.0.1:{httpd.server_port}{server.PREFIX}/?token={token}"
    try:
        print(f"Serving the topology map of {first.get('source') or 'the cluster'} at {url} (Ctrl-C stops)",
              file=out, flush=True)
        if open_browser:
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return 0
