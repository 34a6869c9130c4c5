"""``kubectl troupe topology --web``: the topology map served on 127.0.0.1 from a snapshot
file or the live cluster, decided by the plugin as ``kubectl troupe status`` decides.

:func:`cluster_page` is the page data of a :class:`~reconciler.tools.views.Cluster`;
:func:`serve` reads once (bad input ends it before anything is served), serves the page on
``127.0.0.1:port`` (0: a free port), prints its address, opens a browser unless told not
to, and reads again when the page asks for data and the last read is older than
:data:`~reconciler.tools.web.server.CACHE_SECONDS` (a snapshot file: only when the file
changed), until interrupted.
"""

from __future__ import annotations

import gc
import os
import socketserver
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from reconciler.tools import views
from reconciler.tools.web import data, server


def cluster_page(cluster: views.Cluster, resource: str, refresh_seconds: float) -> dict[str, Any]:
    """The page data (:func:`reconciler.tools.web.data.page`) of ``cluster``: its topology
    tree (:func:`views.topology`), every gang's status as ``kubectl troupe status -o json``
    gives it (plus ``gang``, its key) and the nodes held for gangs that have not started on
    them."""
    tree = views.topology(cluster, resource)
    rows = [{"gang": s.gang.key, **s.to_json()} for s in views.status(cluster)]
    marks = data.node_marks(cluster.snapshot, views.gang_of_pods(cluster))
    return data.page(tree, rows, marks, resource=resource, levels=cluster.config.topology_levels,
                     source=cluster.source, at=cluster.now, refresh_seconds=refresh_seconds)


class QuietHandler(WSGIRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server answering each request on a thread of its own."""

    daemon_threads = True


def reader(read: Callable[[], views.Cluster], resource: str, refresh_seconds: float,
           snapshot: str | None) -> Callable[[], Mapping[str, Any]]:
    """What the page's data is made by: ``read()`` and :func:`cluster_page`, again on each
    call; for a ``snapshot`` file (not ``-``), the last answer as long as the file's
    modification time and size are the same."""
    last: list[Any] = [None, None]

    def produce() -> Mapping[str, Any]:
        stamp = None
        if snapshot and snapshot != "-":
            st = os.stat(snapshot)
            stamp = (st.st_mtime_ns, st.st_size)
            if last[0] == stamp and last[1] is not None:
                return last[1]  # type: ignore[no-any-return]
        elif last[1] is not None and snapshot == "-":
            return last[1]  # type: ignore[no-any-return]
        page = cluster_page(read(), resource, refresh_seconds)
        gc.unfreeze()  # the plugin's read froze what it made; a later read makes it garbage
        last[:] = [stamp, page]
        return page

    return produce


def serve(produce: Callable[[], Mapping[str, Any]], port: int, open_browser: bool,
          out: Any = None) -> int:
    """Serve the page from ``produce`` (:func:`reader`) on ``127.0.0.1:port`` until
    interrupted; returns 0 (``KeyboardInterrupt`` reaches the caller, after the server is
    closed). The first computation is made before serving, so that its errors reach the
    caller. Prints ``Serving the topology map at URL`` on ``out`` (default stdout)."""
    out = out or sys.stdout
    cached = server.CachedData(produce)
    first = produce()  # raises for bad input: nothing served
    cached.put(first)
    httpd = make_server("127.0.0.1", port, server.wsgi(cached), server_class=ThreadingServer, handler_class=QuietHandler)
    url = f"http://127.0.0.1:{httpd.server_port}{server.PREFIX}/"
    try:
        print(f"Serving the topology map of {first.get('source') or 'the cluster'} at {url} (Ctrl-C stops)",
              file=out, flush=True)
        if open_browser:
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return 0
