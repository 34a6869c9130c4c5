"""JSON logs: one object per line, for the webhook and for gunicorn itself.

Each line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``msg`` and
the fields a caller passes as ``extra={"fields": {...}}``; an exception adds ``exc``
(the traceback stays in the log, never in a response). The formatter is the one both
deployables share, :class:`troupe.logs.JSONFormatter`.

The line per admission review takes a shorter path when served (:class:`FdAdmissionLog`):
the same keys, serialised once and written with one ``os.write`` to stderr. Through the
logging module (a LogRecord, the handler lock, a text stream and its flush) it cost about
7% of the webhook's throughput at 6,000 reviews/s (``docs/decisions/002-webhook.md``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any, Protocol

import orjson
from gunicorn import glogging

from troupe.logs import JSONFormatter, iso_timestamp

#: The logger (and ``logger`` key) of the admission lines.
ADMISSION_LOGGER = "troupe.webhook.admission"


def json_line(out: dict[str, Any]) -> bytes:
    """``out`` as one line of JSON (bytes, ending in a newline); never raises."""
    try:
        return orjson.dumps(out, default=str, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer beyond 64 bits in a field: the standard library copes
        return (json.dumps(out, separators=(",", ":"), default=str) + "\n").encode()


class AdmissionLog(Protocol):
    """Where the one line per admission review goes."""

    def write(self, fields: dict[str, Any]) -> None:
        """Record one review (uid, namespace, name, operation, outcome, duration_ms, ...)."""


class LoggingAdmissionLog:
    """Admission lines through the ``troupe.webhook.admission`` logger (tests, embedding)."""

    def __init__(self) -> None:
        self._log = logging.getLogger(ADMISSION_LOGGER)

    def write(self, fields: dict[str, Any]) -> None:
        self._log.info("admission", extra={"fields": fields})


class FdAdmissionLog:
    """Admission lines written straight to a file descriptor (stderr when served).

    One ``os.write`` per line under a lock, so lines of one process never interleave
    (and lines up to the pipe buffer, 4 KiB, not even between processes). A failing write
    is dropped: a review is never failed for its log line. The lines are ``info``: with
    ``level`` above ``logging.INFO`` (``--log-level warning`` or ``error``) none is written.
    """

    def __init__(self, fd: int = 2, level: int = logging.INFO) -> None:
        self.fd = fd
        self.enabled = level <= logging.INFO
        self._lock = threading.Lock()

    def write(self, fields: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = json_line({"ts": iso_timestamp(time.time()), "level": "info", "logger": ADMISSION_LOGGER,
                          "msg": "admission", **fields})
        with self._lock:
            try:
                while line:
                    line = line[os.write(self.fd, line):]
            except OSError:
                pass


def configure_troupe_logging(level: int = logging.INFO) -> None:
    """Send the ``troupe`` loggers to stderr as JSON lines, at ``level`` (a :mod:`logging`
    level) and above (idempotent; a later call sets the level again).

    Also turns off what the JSON lines never show, as the logging HOWTO's "Optimization"
    section describes: caller lookup (``logging._srcfile``), thread, process and
    multiprocessing names.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logger = logging.getLogger("troupe")
    logger.setLevel(level)
    if any(getattr(h, "_troupe", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    handler._troupe = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False


class GunicornJSONLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no types
    """gunicorn's logger class with JSON lines on its error log, and the ``troupe`` loggers
    set up alongside (``logger_class`` in ``webhook/gunicorn_conf.py``), both at gunicorn's
    ``loglevel`` (``--log-level``). The access log stays off: the webhook writes its own
    line per admission."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JSONFormatter())
        configure_troupe_logging(self.LOG_LEVELS.get(str(cfg.loglevel).lower(), logging.INFO))
