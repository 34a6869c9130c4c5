"""Start, record, watch and stop the control plane's processes.

Each component runs in its own session (``start_new_session``), so it is the leader of
its own process group, survives the terminal's Ctrl-C and, for ``up``, the exit of the
Python process that started it. What was started is recorded in ``<run_dir>/pids.json``
as ``{"components": [{"name", "pid", "start_ticks", "executable", "log"}, ...]}``;
``start_ticks`` (field 22 of ``/proc/<pid>/stat``) guards against signalling an unrelated
process that reused a PID. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1
_TAIL_LINES = 30


class ComponentDied(RuntimeError):
    """A control-plane component exited; the message names it, its exit code and its log tail."""


@dataclass(frozen=True)
class Recorded:
    """A started component as written to ``pids.json``."""

    name: str
    pid: int
    start_ticks: int
    executable: str
    log: str


def tail(path: Path | str, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def died_message(name: str, code: int | None, log: Path | str) -> str:
    """``"<name> exited with code N; last lines of <log>:\\n..."`` (signal deaths as -N)."""
    how = (
        f"code {code}"
        if code is None or code >= 0
        else f"signal {-code} ({signal.Signals(-code).name})"
    )
    return f"{name} exited with {how}; last lines of {log}:\n{tail(log)}"


def _start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def is_running(record: Recorded) -> bool:
    """True when the recorded process still exists (same PID *and* same start time)."""
    return _start_ticks(record.pid) == record.start_ticks and not _is_zombie(record.pid)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


@dataclass
class Started:
    """A component this process started: its Popen, record and open log handle."""

    record: Recorded
    popen: subprocess.Popen[bytes]
    log_handle: IO[bytes]


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    die_with_parent: bool,
    env: dict[str, str] | None = None,
) -> Started:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log_path``.

    With ``die_with_parent`` the kernel sends it SIGKILL when the starting thread exits
    (``PR_SET_PDEATHSIG``), so a crashed or killed test run leaves nothing behind. SIGKILL,
    not SIGTERM: terminated all at once, etcd waits for the API server's watch streams and
    the API server for etcd, and both linger for seconds; the run dir is throwaway. Raises
    ``FileNotFoundError`` naming the executable when it does not exist.
    """
    if not Path(argv[0]).is_file():
        raise FileNotFoundError(
            f"{name}: executable {argv[0]} does not exist (run: python -m devtools.devcluster build)"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115  closed in stop_all / detach
    log.write(f"$ {' '.join(argv)}\n".encode())
    log.flush()
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent if die_with_parent else None,  # only prctl, no locks
        env=env,
    )
    ticks = _start_ticks(popen.pid)
    record = Recorded(name, popen.pid, ticks if ticks is not None else -1, argv[0], str(log_path))
    return Started(record, popen, log)


def write_pids(path: Path, records: Iterable[Recorded]) -> None:
    """Write ``pids.json`` atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"components": [asdict(r) for r in records]}, indent=2) + "\n")
    os.replace(tmp, path)


def read_pids(path: Path) -> list[Recorded]:
    """Read ``pids.json``; raises ``FileNotFoundError`` or ``ValueError`` (malformed)."""
    try:
        data = json.loads(path.read_text())
        return [Recorded(**item) for item in data["components"]]
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a pids file: {err}") from err


def stop_all(
    records: Sequence[Recorded], popens: Iterable[subprocess.Popen[bytes]] = (), grace: float = 5.0
) -> list[str]:
    """Stop the recorded process groups in reverse start order; returns who needed SIGKILL.

    Each gets SIGTERM and ``grace`` seconds to exit, then SIGKILL. Reverse order (kwok and
    the controllers, then kube-apiserver, then etcd) matters: signalled all at once, etcd
    waits for the API server's open watch streams and the API server for etcd, and both
    end up killed. Processes whose PID now belongs to another process (start time
    differs) are left alone. Our own children (``popens``) are reaped.
    """
    popen_by_pid = {p.pid: p for p in popens}
    killed = []
    for record in reversed(records):
        popen = popen_by_pid.get(record.pid)
        if is_running(record) and (popen is None or popen.poll() is None):
            _signal_group(record.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while not _gone(record, popen) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _gone(record, popen):
                killed.append(record.name)
                _signal_group(record.pid, signal.SIGKILL)
        if popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
    return killed


def _gone(record: Recorded, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        return popen.poll() is not None
    return not is_running(record)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # Each component leads its own session and group (start_new_session), so pgid == pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Monitor:
    """A daemon thread that notices a started component exiting on its own.

    On the first death it stores a :class:`ComponentDied` in :attr:`failure` and calls
    ``on_failure`` with it once (from the monitor thread). :meth:`stop` ends the thread
    before a deliberate shutdown so that it is not reported as a failure.
    """

    def __init__(
        self,
        started: Sequence[Started],
        on_failure: Callable[[ComponentDied], None],
        interval: float = 0.5,
    ) -> None:
        self._started = list(started)
        self._on_failure = on_failure
        self._interval = interval
        self._stopped = threading.Event()
        self.failure: ComponentDied | None = None
        self._thread = threading.Thread(target=self._run, name="devcluster-monitor", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def discard(self, started: Started) -> None:
        """Stop watching ``started`` (a component stopped on purpose, to be started again)."""
        if started in self._started:
            self._started.remove(started)

    def add(self, started: Started) -> None:
        """Watch one more component."""
        self._started.append(started)

    def stop(self) -> None:
        """Stop watching (idempotent); waits for the thread to finish its current round."""
        self._stopped.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def check_now(self) -> ComponentDied | None:
        """Poll once, synchronously; returns (and stores) the first death found."""
        if self.failure is None:
            for item in list(self._started):
                code = item.popen.poll()
                if code is not None:
                    self.failure = ComponentDied(
                        died_message(item.record.name, code, item.record.log)
                    )
                    break
        return self.failure

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            already = self.failure is not None
            failure = self.check_now()
            if failure is not None and not already and not self._stopped.is_set():
                self._on_failure(failure)
                return
