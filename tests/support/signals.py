"""Starting a child process as a non-interactive shell starts a job put in the background
with ``&``: with SIGINT ignored, a disposition the child inherits across ``exec`` (POSIX
Shell Command Language, 2.11), so a test can show that Ctrl-C still stops it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: Ignore SIGINT, then become the command given after it (``exec`` keeps what is ignored).
_TRAMPOLINE = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])"


def sigint_ignored(argv: Sequence[str]) -> list[str]:
    """``argv`` run with SIGINT ignored from its start, as ``sh -c 'argv &'`` would run it."""
    return [sys.executable, "-c", _TRAMPOLINE, *argv]


def started(argv: Sequence[str], ignored: bool) -> list[str]:
    """``argv`` as is, or (``ignored``) run with SIGINT ignored from its start (:func:`sigint_ignored`)."""
    return sigint_ignored(argv) if ignored else list(argv)
