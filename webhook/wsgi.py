"""The bridge between the connection server (:mod:`webhook.server`) and a WSGI application
(PEP 3333): the environ of a complete request, the call of the application, and the JSON
``Status`` body of an error the server answers itself. Nothing here does I/O.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

import h11

log = logging.getLogger("troupe.webhook.server")

#: A WSGI application (PEP 3333).
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def status_body(code: int, message: str) -> bytes:
    """A JSON ``Status`` as the Flask app answers errors (``webhook.app._bad_request``)."""
    import orjson

    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                         "message": message})


def wsgi_environ(request: h11.Request, path: bytes, query: bytes, body: bytes, sockname: Any, peername: Any,
                 tls: bool, multithread: bool) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of a complete request: ``path`` and ``query`` split from
    its target, ``body`` read whole, ``sockname``/``peername`` the socket's addresses
    (``(host, port, ...)`` or None), ``tls`` whether it came over TLS, ``multithread``
    whether the application runs in a pool. Repeated headers are joined with ``,``."""
    server = sockname or ("", 0)
    peer = peername or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method.decode("ascii"),
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("ascii"),
        "REMOTE_ADDR": str(peer[0]),
        "REMOTE_PORT": str(peer[1]),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https" if tls else "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": multithread,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in request.headers:
        key = name.decode("latin-1").upper().replace("-", "_")
        text = value.decode("latin-1")
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = text
        elif key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # the body is read already; its length is CONTENT_LENGTH above
        else:
            key = "HTTP_" + key
            environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ


def run_wsgi(app: WSGIApp, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Call a WSGI application on a complete request: (status code, headers, body).
    An application that raises gets a 500 without details (logged here)."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and started:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [status, headers]
        return chunks.append

    try:
        result = app(environ, start_response)
        try:
            for chunk in result:
                if chunk:
                    chunks.append(chunk)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started
        code = int(status.split(" ", 1)[0])
        return code, [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers], b"".join(chunks)
    except Exception:
        log.exception("the application failed")
        return 500, [(b"content-type", b"application/json")], status_body(500, "internal server error")
