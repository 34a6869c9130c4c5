"""The webhook's connections, served by one event loop per worker process, so that no slow
or silent client can hold what real admissions need.

Why (``docs/decisions/012-slow-clients.md``): a thread-per-connection server that reads a
request in the thread (gunicorn's gthread and sync workers) lets a client that sends one
byte and then nothing hold that thread for as long as it likes; 16 such clients held every
thread of the chart's two replicas, and with ``failurePolicy: Fail`` every opted-in pod
creation failed. Here, every byte a client sends is read by the event loop, which never
waits on one client:

- **TLS handshake deadline**: ``Limits.handshake_timeout`` seconds from accept.
- **Whole-request deadline**: ``Limits.request_timeout`` seconds from the end of the
  handshake (first request) or from the request's first byte (later requests on a kept-alive
  connection) to its last body byte; then the connection is closed.
- **Idle keep-alive**: ``Limits.keepalive_timeout`` seconds without a byte between
  requests closes the connection (kube-apiserver keeps connections open and closes them
  itself after 90 s idle).
- **Connection cap** per worker, ``Limits.max_connections``: at the cap, a new connection
  makes room by closing the oldest one that has not delivered a complete request (still
  handshaking or reading), else the oldest idle one; a client that completes its request in
  milliseconds is never crowded out by clients that do not.
- **Size limits**: headers beyond ``Limits.max_header_bytes`` get 431, a body beyond
  ``Limits.max_body_bytes`` 413, before it is read.
- **Bytes held per worker**, ``Limits.max_buffered_bytes``: request bodies being read and
  answers a client has not taken (``docs/decisions/028-webhook-bounds-and-server.md``).
  Past it, the connection holding the most (reading a request, or not reading its answer)
  is closed.
- **Write backpressure**: while a client does not take its answer (the transport's write
  buffer is over its high-water mark), its connection reads no further request; an answer
  not taken within ``Limits.request_timeout`` closes it.

Only a complete request reaches the WSGI application (Flask; the bridge is :mod:`webhook.wsgi`), run in the loop itself or,
with ``threads > 1``, in a pool of that many threads. HTTP/1.1 is parsed by h11 (a
sans-I/O parser). TLS is done by each connection with an ``ssl.SSLObject`` over memory
buffers, with a context chosen for each new connection (:func:`webhook.tls.reloader_for`:
rotated certificate files serve new connections); asyncio's own TLS transport keeps a
256 KiB read buffer per connection, so 1,000 connections of a worker took 280 MiB with it.
A listener may also be plain HTTP (the health port, ``--health-bind``), answering only
its ``paths``.

Nothing here knows Troupe: it serves any WSGI application.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import h11

from webhook.wsgi import WSGIApp, run_wsgi, status_body, wsgi_environ

log = logging.getLogger("troupe.webhook.server")

#: Why a connection was closed by the server, for the ``closed`` callback (and metrics).
CLOSE_REASONS = ("handshake_failed", "handshake_timeout", "request_timeout", "idle", "evicted",
                 "over_capacity", "bad_request", "not_ready", "shutdown", "write_timeout", "over_buffer")
_ABORT = frozenset({"handshake_timeout", "request_timeout", "idle", "evicted", "over_capacity", "not_ready",
                    "write_timeout", "over_buffer"})
#: Connection states a new connection or the byte budget may close, most expendable first:
#: none of them has a complete request being answered.
_UNPRODUCTIVE = ("handshake", "reading", "draining", "idle")


@dataclass(frozen=True)
class Limits:
    """Per-connection deadlines (seconds) and sizes (bytes), the cap on connections of one
    worker and on the bytes it holds for them (request bodies being read, answers not yet
    taken). Defaults: ``docs/decisions/012-slow-clients.md`` and
    ``docs/decisions/028-webhook-bounds-and-server.md`` (body and buffered bytes)."""

    handshake_timeout: float = 5.0
    request_timeout: float = 10.0
    keepalive_timeout: float = 120.0
    max_connections: int = 1000
    max_body_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 16 * 1024
    max_buffered_bytes: int = 16 * 1024 * 1024


#: The defaults, shared (a frozen dataclass).
DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Listener:
    """A listening socket and how it is served: ``tls`` None for plain HTTP, else a
    callable returning the TLS context for a new connection (it may raise ``OSError`` or
    ``ssl.SSLError`` while no certificate can be loaded: the connection is then closed);
    ``paths`` the only paths answered (others get 404), None for all."""

    sock: socket.socket
    tls: Callable[[], ssl.SSLContext] | None
    paths: frozenset[str] | None = None


class _Connection(asyncio.Protocol):
    """One client connection: its TLS state (an ``ssl.SSLObject`` over memory buffers,
    so a connection costs OpenSSL's state and no fixed read buffer), h11 state, the request
    being read, and its one timer (handshake, request or idle deadline)."""

    def __init__(self, server: ConnectionServer, listener: Listener) -> None:
        self.server = server
        self.listener = listener
        self.tls = listener.tls is not None
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.limits.max_header_bytes)
        self.transport: asyncio.Transport | None = None
        self.sslobj: ssl.SSLObject | None = None
        self.incoming = self.outgoing = ssl.MemoryBIO()
        # handshake -> reading -> busy -> idle -> reading ...; closed at the end.
        self.state = "handshake"
        self.request: h11.Request | None = None
        self.body: list[bytes] = []
        self.body_size = 0
        #: Bytes counted against the worker's ``max_buffered_bytes``: the request body read
        #: so far, plus the answer's bytes still buffered while the client does not read.
        self.held = 0
        self.write_paused = False
        self.timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.server._admit(self):
            self.close("over_capacity", "")
            return
        if self.listener.tls is None:
            self._start_reading()
            return
        try:
            ctx = self.listener.tls()
        except (OSError, ssl.SSLError):  # no certificate (yet): nothing to serve TLS with
            self.close("not_ready", "")
            return
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.sslobj = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self._arm(self.server.limits.handshake_timeout, "handshake_timeout")

    def data_received(self, data: bytes) -> None:
        sslobj = self.sslobj
        if sslobj is None:
            self._received(data)
            return
        self.incoming.write(data)
        if self.state == "handshake":
            try:
                sslobj.do_handshake()
            except ssl.SSLWantReadError:
                self._flush_tls()
                return
            except (ssl.SSLError, OSError) as e:
                self._flush_tls()  # the alert, if any
                log.debug("handshake failed: %s", e)
                self.close("handshake_failed", str(e))
                return
            self._flush_tls()
            self._start_reading()
        chunks = []
        ended = False
        while True:
            try:
                chunk = sslobj.read(65536)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # close_notify
                ended = True
                break
            except ssl.SSLError as e:
                self.close("bad_request", f"TLS: {e}")
                return
            if not chunk:
                ended = True
                break
            chunks.append(chunk)
        self._flush_tls()  # TLS 1.3 session tickets, key updates
        if chunks:
            self._received(b"".join(chunks))
        if ended and self.state != "closed":
            self.eof_received()

    def eof_received(self) -> bool | None:
        if self.state == "handshake":
            self.close(None, "")
            return None
        with contextlib.suppress(h11.RemoteProtocolError):
            self.h11.receive_data(b"")
        self._read_events()
        # A client that half-closed after its request still gets the answer being made.
        return True if self.state == "busy" else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.state = "closed"
        self.server._forget(self)

    def pause_writing(self) -> None:
        """The transport's write buffer went over its high-water mark: the client is not
        taking what it was sent."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The client took enough: an answer waiting to drain lets the next request in."""
        self.write_paused = False
        if self.state == "draining":
            self.server._hold(self, -self.held)
            self._next_request()

    def _start_reading(self) -> None:
        """The first request may come: its deadline starts now."""
        self.state = "reading"
        self._arm(self.server.limits.request_timeout, "request_timeout")

    def _received(self, data: bytes) -> None:
        if self.state == "idle":
            self._start_reading()
        try:
            self.h11.receive_data(data)
        except h11.RemoteProtocolError as e:  # data after the peer's close
            self.close("bad_request", str(e))
            return
        self._read_events()

    def _flush_tls(self) -> None:
        data = self.outgoing.read()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # --- timers ------------------------------------------------------------------------
    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self.timer = self.server.loop.call_later(seconds, self.close, reason, f"{reason} after {seconds:g} s")

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # --- reading -----------------------------------------------------------------------
    def _read_events(self) -> None:
        while self.state == "reading":
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as e:
                self._refuse(e.error_status_hint, f"malformed HTTP request: {e}")
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                if not self._start_request(event):
                    return
            elif isinstance(event, h11.Data):
                self.body_size += len(event.data)
                if self.body_size > self.server.limits.max_body_bytes:
                    self._refuse(413, f"request body over {self.server.limits.max_body_bytes} bytes")
                    return
                self.body.append(event.data)
                if not self.server._hold(self, len(event.data)):
                    return  # this connection held the most and was closed
            elif isinstance(event, h11.EndOfMessage):
                self._disarm()
                self.state = "busy"
                assert self.transport is not None
                self.transport.pause_reading()  # pipelined requests wait their turn
                self.server._dispatch(self)
                return
            elif isinstance(event, h11.ConnectionClosed):
                self.close(None, "")
                return

    def _start_request(self, request: h11.Request) -> bool:
        self.request, self.body, self.body_size = request, [], 0
        # h11 bounds a head that arrives in pieces; one that arrives whole is measured here.
        head = len(request.target) + sum(len(n) + len(v) + 4 for n, v in request.headers)
        if head > self.server.limits.max_header_bytes:
            self._refuse(431, f"request head over {self.server.limits.max_header_bytes} bytes")
            return False
        for name, value in request.headers:
            if name == b"content-length" and int(value) > self.server.limits.max_body_bytes:
                self._refuse(413, f"request body over {self.server.limits.max_body_bytes} bytes")
                return False
        if self.h11.they_are_waiting_for_100_continue:
            self._send([h11.InformationalResponse(status_code=100, headers=[])])
        return True

    # --- writing -----------------------------------------------------------------------
    def _send(self, events: list[Any]) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        data = b"".join(self.h11.send(e) or b"" for e in events)
        if self.sslobj is None:
            self.transport.write(data)
            return
        self.sslobj.write(data)
        self._flush_tls()

    def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Send one response, then wait for the next request or close."""
        if self.state == "closed":
            return
        assert self.request is not None
        head = self.request.method == b"HEAD" or status in (204, 304)
        if not any(n.lower() == b"content-length" for n, _ in headers) and not head:
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        try:
            events: list[Any] = [h11.Response(status_code=status, headers=headers)]
            if body and not head:
                events.append(h11.Data(data=body))
            events.append(h11.EndOfMessage())
            self._send(events)
        except h11.LocalProtocolError as e:
            log.error("response not sent: %s", e)
            self.close("bad_request", str(e))
            return
        self.request, self.body = None, []
        self.server._hold(self, -self.held)
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE or not self.server.accepting:
            self.close(None, "")
            return
        self.h11.start_next_cycle()
        if self.write_paused and self.transport is not None:
            # Backpressure: the client is not reading; its next request waits until it takes
            # this answer, for at most the request deadline, and the answer's bytes count.
            self.state = "draining"
            self._arm(self.server.limits.request_timeout, "write_timeout")
            self.server._hold(self, self.transport.get_write_buffer_size())
            return
        self._next_request()

    def _next_request(self) -> None:
        """The answer is out: wait for the next request (one already pipelined is read on
        the loop's next turn)."""
        self.state = "idle"
        self._arm(self.server.limits.keepalive_timeout, "idle")
        assert self.transport is not None
        self.transport.resume_reading()
        if self.h11.trailing_data[0]:  # a pipelined request already arrived
            self._start_reading()
            # Read it on the loop's next turn, never from inside this response: an answer
            # given inline would recurse once per pipelined request, and other connections
            # get their turn in between.
            self.server.loop.call_soon(self._read_events)

    def _refuse(self, status: int, message: str) -> None:
        """Answer an error the application never sees (logged here), and close."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        log.info("request refused", extra={"fields": {"status": status, "message": message,
                                                       "client": f"{peer[0]}:{peer[1]}" if peer else None}})
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            body = status_body(status, message)
            with contextlib.suppress(h11.LocalProtocolError):
                self._send([h11.Response(status_code=status, headers=[
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")]), h11.Data(data=body), h11.EndOfMessage()])
        self.close("bad_request", message)

    def close(self, reason: str | None, detail: str) -> None:
        """Close the connection (``reason`` one of :data:`CLOSE_REASONS`, None for an
        orderly end: the client closed, or asked to)."""
        if self.state == "closed":
            return
        self._disarm()
        self.server._hold(self, -self.held)
        if reason is not None:
            self.server._closed(reason)
        if self.transport is not None:
            if reason in _ABORT:
                self.transport.abort()  # nothing worth flushing to a client that stalled
            else:
                self.transport.close()
        self.state = "closed"
        self.server._forget(self)


class ConnectionServer:
    """Serves a WSGI ``app`` on ``listeners`` from the running event loop.

    ``threads`` > 1 runs the application in a pool of that many threads; otherwise in the
    loop itself (the webhook's application is CPU-bound and answers in microseconds).
    ``closed(reason)`` is called for every connection the server closes on its own (a
    deadline, the cap, a malformed request), with a reason of :data:`CLOSE_REASONS`.
    """

    def __init__(self, app: WSGIApp, listeners: list[Listener], limits: Limits = DEFAULT_LIMITS,
                 threads: int = 1, closed: Callable[[str], None] | None = None, backlog: int = 2048) -> None:
        self.app = app
        self.listeners = listeners
        self.limits = limits
        self.backlog = backlog
        self._closed_hook = closed
        self.loop = asyncio.get_running_loop()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="wsgi") if threads > 1 else None
        #: Open connections, oldest first (dicts keep insertion order).
        self.connections: dict[_Connection, None] = {}
        #: Bytes the connections hold (:attr:`_Connection.held`), at most
        #: ``limits.max_buffered_bytes``.
        self.buffered = 0
        self.accepting = False
        self._servers: list[asyncio.Server] = []

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start accepting on every listener (asyncio's accept loop, which also backs off
        when the process runs out of file descriptors)."""
        self.accepting = True
        for listener in self.listeners:
            self._servers.append(await self.loop.create_server(
                functools.partial(_Connection, self, listener), sock=listener.sock, backlog=self.backlog))

    async def stop(self, grace: float) -> None:
        """Stop accepting, close idle and unfinished connections at once, and give requests
        being answered up to ``grace`` seconds."""
        self.accepting = False
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.state != "busy":
                conn.close("shutdown", "")
        deadline = self.loop.time() + grace
        while any(c.state == "busy" for c in self.connections) and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close("shutdown", "")
        if self.pool is not None:
            self.pool.shutdown(wait=False)

    # --- the connection cap ------------------------------------------------------------
    def _admit(self, conn: _Connection) -> bool:
        """Take ``conn`` in: below the cap, or after closing the oldest unproductive
        connection (handshaking, then reading a request that has not completed, then idle).
        False when every connection is being answered."""
        if not self.accepting:
            return False
        if len(self.connections) >= self.limits.max_connections:
            for state in _UNPRODUCTIVE:
                oldest = next((c for c in self.connections if c.state == state), None)
                if oldest is not None:
                    oldest.close("evicted", "")
                    break
            else:
                return False
        self.connections[conn] = None
        return True

    def _forget(self, conn: _Connection) -> None:
        self.connections.pop(conn, None)
        self._hold(conn, -conn.held)

    def _hold(self, conn: _Connection, nbytes: int) -> bool:
        """Count ``nbytes`` more (or, negative, fewer) held for ``conn``; past
        ``max_buffered_bytes`` in the worker, close the connections that hold the most until
        it fits (those without a request being answered). False if ``conn`` was closed."""
        nbytes = max(nbytes, -conn.held)
        conn.held += nbytes
        self.buffered += nbytes
        while self.buffered > self.limits.max_buffered_bytes:
            victims = [c for c in self.connections if c.state in _UNPRODUCTIVE and c.held > 0]
            if not victims:
                break
            victim = max(victims, key=lambda c: c.held)
            victim.close("over_buffer", f"holding {victim.held} bytes with the worker over "
                         f"{self.limits.max_buffered_bytes}")
        return conn.state != "closed"

    def _closed(self, reason: str) -> None:
        if self._closed_hook is not None:
            self._closed_hook(reason)

    # --- the application ---------------------------------------------------------------
    def _dispatch(self, conn: _Connection) -> None:
        request = conn.request
        assert request is not None and conn.transport is not None
        target = request.target
        path, _, query = target.partition(b"?")
        paths = conn.listener.paths
        if paths is not None and path.decode("latin-1") not in paths:
            body = status_body(404, "this port serves only " + ", ".join(sorted(paths)))
            conn.respond(404, [(b"content-type", b"application/json")], body)
            return
        environ = wsgi_environ(request, path, query, b"".join(conn.body),
                               conn.transport.get_extra_info("sockname"), conn.transport.get_extra_info("peername"),
                               tls=conn.tls, multithread=self.pool is not None)
        if self.pool is None:
            conn.respond(*run_wsgi(self.app, environ))
            return
        future = self.loop.run_in_executor(self.pool, run_wsgi, self.app, environ)
        future.add_done_callback(lambda f: conn.respond(*f.result()))
