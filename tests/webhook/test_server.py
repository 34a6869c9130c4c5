"""``webhook.server.ConnectionServer`` in-process, on 127.0.0.1 sockets: the deadlines on the
TLS handshake, on a whole request and on idle keep-alive, the connection cap and who makes
room at it, size limits, and HTTP/1.1 details (keep-alive, pipelining, HEAD, 100-continue).

The server runs in an event loop on a thread of the test; the clients are plain blocking
sockets. Deadlines are fractions of a second, and the tests wait for the server to close a
connection (a read that returns), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.webhook_builders import TLSFiles, make_tls
from webhook.server import DEFAULT_LIMITS, ConnectionServer, Limits, Listener
from webhook.tls import CertReloader
from webhook.wsgi import run_wsgi


def echo_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """Answers ``<method> <path> <body length>`` and echoes one header, X-Probe."""
    body = environ["wsgi.input"].read()
    text = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']} {len(body)} {environ.get('HTTP_X_PROBE', '')}"
    out = text.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
    return [out]


class Running:
    """A ConnectionServer on its own loop thread; ``port`` (TLS or plain) and ``closed``."""

    def __init__(self, limits: Limits, tls: TLSFiles | None, app: Any = echo_app, threads: int = 1,
                 paths: frozenset[str] | None = None) -> None:
        self.closed: Counter[str] = Counter()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.tls = tls
        context = CertReloader(str(tls.cert), str(tls.key)).context if tls else None
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)

            async def start() -> None:
                self.server = ConnectionServer(app, [Listener(self.sock, context, paths)], limits, threads=threads,
                                               closed=lambda reason: self.closed.update([reason]))
                await self.server.start()
                ready.set()

            self.loop.run_until_complete(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def connections(self) -> int:
        return len(self.server.connections)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(1.0), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.sock.close()

    def raw(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def client(self) -> socket.socket:
        """A connected client, TLS when the server serves TLS."""
        raw = self.raw()
        if self.tls is None:
            return raw
        return self.tls.client_context().wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls(tmp_path_factory.mktemp("server-tls"))


@contextmanager
def serving(limits: Limits = DEFAULT_LIMITS, tls: TLSFiles | None = None, **kw: Any) -> Iterator[Running]:
    r = Running(limits, tls, **kw)
    try:
        yield r
    finally:
        r.stop()


def request(method: str = "GET", path: str = "/x", body: bytes = b"", headers: str = "") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{headers}\r\n").encode() + body


_unread: dict[int, bytes] = {}


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response (status, body) read from ``sock`` (Content-Length framed); bytes of a
    pipelined next response are kept for the next call."""
    data = _unread.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        rest += chunk
    if rest[length:]:
        _unread[sock.fileno()] = rest[length:]
    return status, rest[:length]


def closed_by_server(sock: socket.socket, within: float) -> float:
    """Seconds until the server closed ``sock`` (a read returns b"" or fails); fails the
    test if it is still open after ``within`` seconds."""
    start = time.monotonic()
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {within} s")
    return time.monotonic() - start


# --- deadlines -----------------------------------------------------------------------------


def test_a_handshake_that_stalls_after_one_byte_is_closed_at_its_deadline(tls: TLSFiles) -> None:
    with serving(Limits(handshake_timeout=0.3), tls) as r:
        slow = r.raw()
        slow.sendall(b"\x16")  # the first byte of a TLS record, then nothing
        assert closed_by_server(slow, within=5) < 3
        deadline = time.monotonic() + 5
        while r.closed["handshake_timeout"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r.closed["handshake_timeout"] == 1


def test_a_request_whose_headers_never_end_is_closed_at_its_deadline(tls: TLSFiles) -> None:
    with serving(Limits(request_timeout=0.3), tls) as r:
        c = r.client()
        c.sendall(b"POST /mutate HTTP/1.1\r\nHost: t\r\n")  # no end of headers
        assert closed_by_server(c, within=5) < 3
        assert r.closed["request_timeout"] == 1


def test_a_body_that_trickles_in_is_closed_at_the_requests_deadline_not_per_byte() -> None:
    with serving(Limits(request_timeout=0.5)) as r:
        c = r.client()
        c.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n")
        start = time.monotonic()
        with pytest.raises((ConnectionError, OSError)):
            while time.monotonic() - start < 5:
                c.sendall(b"a")  # a byte every 50 ms keeps no per-read timeout from firing
                time.sleep(0.05)
        assert time.monotonic() - start < 3
        assert r.closed["request_timeout"] == 1


def test_a_connection_silent_after_its_handshake_is_closed_at_the_request_deadline(tls: TLSFiles) -> None:
    with serving(Limits(request_timeout=0.3), tls) as r:
        c = r.client()
        assert closed_by_server(c, within=5) < 3
        assert r.closed["request_timeout"] == 1


def test_an_idle_kept_alive_connection_is_closed_after_the_keepalive_timeout() -> None:
    with serving(Limits(keepalive_timeout=0.3, request_timeout=60)) as r:
        c = r.client()
        c.sendall(request())
        assert read_response(c) == (200, b"GET /x 0 ")
        assert closed_by_server(c, within=5) < 3
        assert r.closed["idle"] == 1


def test_the_request_deadline_starts_again_for_each_request_on_a_kept_alive_connection() -> None:
    with serving(Limits(request_timeout=0.4, keepalive_timeout=60)) as r:
        c = r.client()
        for i in range(4):  # 4 x 0.2 s: longer than one deadline in all
            c.sendall(request(headers=f"X-Probe: {i}\r\n"))
            assert read_response(c) == (200, f"GET /x 0 {i}".encode())
            time.sleep(0.2)  # idle between requests: the idle timeout applies, not the request deadline
        assert r.closed["request_timeout"] == 0


# --- the cap ----------------------------------------------------------------------------------


def test_at_the_cap_the_oldest_connection_without_a_request_makes_room(tls: TLSFiles) -> None:
    with serving(Limits(max_connections=3, handshake_timeout=30, request_timeout=30), tls) as r:
        kept = r.client()  # finishes a request, then stays idle: productive
        kept.sendall(request())
        assert read_response(kept)[0] == 200
        slow = [r.raw() for _ in range(2)]
        for s in slow:
            s.sendall(b"\x16")
        deadline = time.monotonic() + 5
        while r.connections() < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r.connections() == 3
        newcomer = r.client()  # at the cap: the oldest slow one goes, the idle one stays
        newcomer.sendall(request())
        assert read_response(newcomer)[0] == 200
        assert closed_by_server(slow[0], within=5) < 5
        kept.sendall(request(headers="X-Probe: still\r\n"))
        assert read_response(kept) == (200, b"GET /x 0 still")
        assert r.closed["evicted"] == 1


def test_at_the_cap_with_nothing_to_evict_an_idle_connection_makes_room() -> None:
    with serving(Limits(max_connections=2)) as r:
        first, second = r.client(), r.client()
        for c in (first, second):
            c.sendall(request())
            assert read_response(c)[0] == 200
        third = r.client()
        third.sendall(request())
        assert read_response(third)[0] == 200
        assert closed_by_server(first, within=5) < 5
        assert r.closed["evicted"] == 1


# --- sizes, errors, paths -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "raw", "want_status"), [
    ("a declared body over the limit", b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n", 413),
    ("a chunked body that grows over the limit",
     b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + b"200\r\n" + b"a" * 512 + b"\r\n"
     + b"400\r\n" + b"a" * 1024 + b"\r\n", 413),
    ("headers over the limit", b"GET /x HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n", 431),
    ("a request line that is not HTTP", b"HELLO\r\n\r\n", 400),
])
def test_what_the_application_never_sees_is_answered_by_the_server(name: str, raw: bytes, want_status: int) -> None:
    with serving(Limits(max_body_bytes=1000, max_header_bytes=4096)) as r:
        c = r.client()
        c.sendall(raw)
        status, body = read_response(c)
        assert status == want_status and b'"kind":"Status"' in body
        assert closed_by_server(c, within=5) < 5


def test_a_plain_listener_answers_only_its_paths() -> None:
    with serving(paths=frozenset({"/healthz"})) as r:
        c = r.client()
        c.sendall(request(path="/healthz"))
        assert read_response(c) == (200, b"GET /healthz 0 ")
        c.sendall(request("POST", "/mutate", b"{}"))
        status, body = read_response(c)
        assert status == 404 and b"/healthz" in body


# --- HTTP/1.1 -------------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order() -> None:
    with serving() as r:
        c = r.client()
        c.sendall(b"".join(request(headers=f"X-Probe: {i}\r\n") for i in range(3)))
        assert [read_response(c)[1] for _ in range(3)] == [f"GET /x 0 {i}".encode() for i in range(3)]


def test_two_thousand_pipelined_requests_are_all_answered_without_recursion() -> None:
    """Each pipelined request is read on a new turn of the event loop, not from inside the
    previous response (which recursed once per request: 2,000 gave 324 answers and a
    RecursionError)."""
    with serving() as r:
        c = r.client()
        c.settimeout(30)
        c.sendall(b"".join(request(headers=f"X-Probe: {i}\r\n") for i in range(2000)))
        answers = [read_response(c) for _ in range(2000)]
        assert [status for status, _ in answers] == [200] * 2000
        assert answers[-1][1] == b"GET /x 0 1999"


def test_head_gets_headers_only_and_connection_close_is_honoured() -> None:
    with serving() as r:
        c = r.client()
        c.sendall(request("HEAD") + request(headers="Connection: close\r\n"))
        c.settimeout(5)
        data = b""
        while chunk := c.recv(65536):
            data += chunk
        assert data.count(b"HTTP/1.1 200") == 2 and data.endswith(b"GET /x 0 ")


def test_a_client_that_half_closes_after_its_request_still_gets_the_answer() -> None:
    def slow_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        time.sleep(0.2)  # the answer is still being made when the client's EOF arrives
        return echo_app(environ, start_response)

    with serving(app=slow_app, threads=2) as r:
        c = r.client()
        c.sendall(request("POST", "/x", b"abc"))
        c.shutdown(socket.SHUT_WR)
        assert read_response(c) == (200, b"POST /x 3 ")


def test_a_client_expecting_100_continue_is_told_to_go_on() -> None:
    with serving() as r:
        c = r.client()
        c.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        assert c.recv(100).startswith(b"HTTP/1.1 100")
        c.sendall(b"abc")
        assert read_response(c) == (200, b"POST /x 3 ")


def test_the_application_can_run_in_threads_of_a_pool(tls: TLSFiles) -> None:
    with serving(tls=tls, threads=3) as r:
        clients = [r.client() for _ in range(3)]
        for i, c in enumerate(clients):
            c.sendall(request("POST", f"/t{i}", b"x" * i))
        assert [read_response(c) for c in clients] == [(200, f"POST /t{i} {i} ".encode()) for i in range(3)]


def test_an_application_that_raises_gets_a_500_without_details() -> None:
    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("secret detail")

    status, _, body = run_wsgi(broken, {})
    assert status == 500 and b"secret" not in body and b"internal server error" in body


def test_no_certificate_yet_means_new_tls_connections_are_closed(tmp_path: Path) -> None:
    missing = TLSFiles(tmp_path, None, tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt")  # type: ignore[arg-type]
    with serving(tls=missing) as r:
        c = r.raw()
        assert closed_by_server(c, within=5) < 5
        assert r.closed["not_ready"] == 1


# --- however the bytes are cut, the answers are the same ------------------------------------

_STREAM = (request("POST", "/a", b'{"x": 1}', "X-Probe: one\r\n")
           + b"POST /b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nX-Probe: two\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
           + request("GET", "/c%20d", headers="X-Probe: three\r\n"))
_WANT = [(200, b"POST /a 8 one"), (200, b"POST /b 3 two"), (200, b"GET /c d 0 three")]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[Running]:
    with serving() as r:
        yield r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(_STREAM) - 1), max_size=12, unique=True))
def test_requests_cut_anywhere_get_the_same_answers(shared_server: Running, cuts: list[int]) -> None:
    c = shared_server.client()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    bounds = [0, *sorted(cuts), len(_STREAM)]
    for start, end in itertools.pairwise(bounds):
        c.sendall(_STREAM[start:end])
    assert [read_response(c) for _ in _WANT] == _WANT
    c.close()


# --- bytes held: write backpressure and the worker's budget (decision 028) ----------------


def test_a_client_that_never_reads_its_answers_gets_no_more_answers_and_is_closed(tls: TLSFiles) -> None:
    """A client pipelines requests whose answers are large and reads none: the server
    stops reading its requests while the answer waits (backpressure), so the bytes it holds
    stay at about one answer (beyond what the kernel's socket buffers take, a few MiB), and
    closes it at the request deadline. Without backpressure it answered all 200 into its
    write buffer (50 MiB for this client)."""
    answered = [0]

    def big_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        answered[0] += 1
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"x" * 256 * 1024]

    with serving(Limits(request_timeout=1.0), tls, app=big_app) as r:
        raw = r.raw()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c = r.tls.client_context().wrap_socket(raw, server_hostname="127.0.0.1") if r.tls else raw
        sender = threading.Thread(target=lambda: c.sendall(request() * 200), daemon=True)
        sender.start()
        deadline = time.monotonic() + 10
        while r.closed["write_timeout"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.closed["write_timeout"] == 1
        assert answered[0] < 50, f"{answered[0]} answers made for a client that read none"
        assert r.server.buffered == 0
        c.close()


def test_past_the_workers_byte_budget_the_connection_holding_the_most_is_closed() -> None:
    """Three clients each send most of a large body and stop; past ``max_buffered_bytes``
    the one holding the most is closed, and a small request is still answered."""
    limits = Limits(max_buffered_bytes=1_000_000, max_body_bytes=4_000_000, request_timeout=30)
    with serving(limits) as r:
        heavy = []
        held = 0
        for size in (100_000, 200_000, 900_000):
            c = r.client()
            c.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3000000\r\n\r\n" + b"a" * size)
            heavy.append(c)
            held += size
            deadline = time.monotonic() + 10
            while size < 900_000 and r.server.buffered < held and time.monotonic() < deadline:
                time.sleep(0.01)
        # The budget is crossed while the third holds over 700,000 bytes: the most.
        closed_by_server(heavy[2], within=10)
        assert r.closed["over_buffer"] == 1
        assert r.server.buffered <= limits.max_buffered_bytes
        small = r.client()
        small.sendall(request("POST", body=b"hello"))
        assert read_response(small) == (200, b"POST /x 5 ")
        for c in heavy:
            c.close()
