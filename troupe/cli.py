"""What every command line Troupe ships shares: one line on stderr for a user's mistake,
never a traceback (docs/decisions/037-operating.md).

- :class:`OneLineParser`: argparse whose usage errors are one line too.
- :func:`guarded`: runs a ``main``; a closed stdout (``| head``) ends it quietly with
  exit code 141 (a shell's code for SIGPIPE), Ctrl-C with 130 and no traceback.
- :func:`interruptible`: Ctrl-C stops a command that waits for it even when it was
  started with SIGINT ignored.
- :func:`parse_bind` / :func:`check_bind`: a ``HOST:PORT`` flag, its port in range and
  free, the flag named in the error.
- :func:`rfc3339`: a timestamp flag (RFC 3339, with a zone).
- :func:`yaml_error` (:mod:`troupe.config`'s): a PyYAML error as ``line L, column C: problem``.

Errors are :class:`UsageError`, whose message is the one line to print.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from troupe.config import yaml_error

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_INTERRUPTED", "OneLineParser", "UsageError", "check_bind", "guarded",
           "interruptible", "parse_bind", "rfc3339", "yaml_error"]

#: Exit codes of a closed stdout (128 + SIGPIPE, what a shell reports for a process SIGPIPE
#: killed) and of an interrupt (128 + SIGINT).
EXIT_CLOSED_PIPE, EXIT_INTERRUPTED = 141, 130


class UsageError(ValueError):
    """A user's mistake on the command line; the message is the one line printed."""


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors (an unknown flag, a missing argument, a
    value not among the choices) are one line on stderr, exit code 2, instead of the usage
    block and the error; ``--help`` still prints the usage. Subparsers made by
    ``add_subparsers`` are of this class too (argparse's default)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see --help)`` and exit with code 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def guarded(main: Callable[[], int]) -> int:
    """``main()``'s exit code, with stdout flushed inside, so that a reader that went away
    (``kubectl troupe status | head -1``) ends the command with :data:`EXIT_CLOSED_PIPE` and
    nothing on stderr (Python's own advice: point stdout at /dev/null so the interpreter's
    last flush cannot fail again), and Ctrl-C with :data:`EXIT_INTERRUPTED`."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def interruptible() -> None:
    """Let SIGINT (Ctrl-C, ``kill -INT``) raise ``KeyboardInterrupt`` in this process even
    when it was started with SIGINT ignored; a disposition other than ignored is left as it
    is. Python installs its ``KeyboardInterrupt`` handler only when SIGINT is not ignored at
    start (the ``signal`` module's documentation), and a non-interactive shell starts a job
    put in the background with ``&`` with SIGINT ignored (POSIX Shell Command Language,
    2.11 "Signals and Error Handling"), so without this a command that waits for Ctrl-C
    (``kubectl troupe status -w``, ``topology --web``, the servers) would never stop on it;
    kubectl's own ``-w`` stops either way (Go's ``signal.Notify`` takes the signal back).
    Call it in a command that waits for Ctrl-C, before it waits; off the main thread (where
    Python runs signal handlers, and alone may set them) it does nothing
    (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def parse_bind(flag: str, value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; an empty host means every address) as
    ``(host, port)``. Raises :class:`UsageError` naming ``flag`` when it is not of that
    form or the port is not in 0-65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"{flag} {value!r}: expected HOST:PORT, e.g. 0.0.0.0:8080")
    if not 0 <= int(port) <= 65535:
        raise UsageError(f"{flag} {value!r}: port {int(port)} is out of range (0-65535)")
    return host.strip("[]") or "0.0.0.0", int(port)


def check_bind(flag: str, host: str, port: int) -> None:
    """Raise :class:`UsageError` naming ``flag`` when ``host:port`` cannot be listened on
    now (in use, an address this machine does not have, a privileged port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise UsageError(f"{flag} {host}:{port}: cannot listen: {e.strerror or e}") from None


def rfc3339(flag: str, value: str) -> dt.datetime:
    """An RFC 3339 time (``2026-11-22T10:00:00Z``, ``...+02:00``), aware. Raises
    :class:`UsageError` naming ``flag`` for anything else, a time without a zone too
    (RFC 3339 section 5.6 requires one)."""
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag}: expected an RFC 3339 time such as 2026-11-22T10:00:00Z, got {value!r}") from None
    if parsed.tzinfo is None:
        raise UsageError(f"{flag}: give a time zone (Z or +00:00), got {value!r}")
    return parsed
