"""Troupe's JSON log lines, for the webhook and the reconciler alike.

One JSON object per line with ``ts`` (UTC, ISO 8601 with milliseconds, e.g.
``2026-03-21T10:00:00.123Z``), ``level`` (``info``, ``warning``...), ``logger``, ``msg``, the
fields a caller passes as ``extra={"fields": {...}}`` at the top level, and on an exception
``exc`` (the traceback). The formatting is python-json-logger's
(https://nhairs.github.io/python-json-logger/); this module only names the keys.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pythonjsonlogger.json import JsonFormatter

_second = -1
_second_text = ""

#: python-json-logger's names of the LogRecord attributes, and Troupe's for them.
_KEYS = {"levelname": "level", "name": "logger", "message": "msg", "exc_info": "exc"}


def iso_timestamp(t: float) -> str:
    """``t`` (seconds since the epoch) as ``2026-03-21T10:00:00.123Z``; one ``strftime``
    per second, not per line."""
    global _second, _second_text
    second = int(t)
    if second != _second:
        _second_text, _second = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)), second
    return f"{_second_text}.{int((t - second) * 1000):03d}Z"


class JSONFormatter(JsonFormatter):
    """python-json-logger's formatter with Troupe's keys (see the module docstring).

    Values JSON cannot hold are encoded by the library (datetimes in ISO 8601, enums by
    value, anything else as its ``str``); any other attribute a record carries beyond the
    standard ones is a key of its own. Text stays UTF-8 (not ``\\u`` escapes).
    """

    def __init__(self) -> None:
        super().__init__(["levelname", "name", "message"], rename_fields=_KEYS, json_ensure_ascii=False)

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        """``ts`` first, then the library's fields; ``level`` in lower case and the caller's
        ``fields`` merged into the object."""
        log_data["ts"] = iso_timestamp(record.created)
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()
        fields = log_data.pop("fields", None)
        if isinstance(fields, dict):
            log_data.update(fields)


#: The names ``--log-level`` takes (both deployables), least severe first: the standard
#: library's levels of the same names (https://docs.python.org/3/library/logging.html#levels).
LOG_LEVELS = ("debug", "info", "warning", "error")


def log_level(name: str) -> int:
    """The :mod:`logging` level of one of :data:`LOG_LEVELS` (``"warning"`` -> 30). Raises
    ``ValueError`` naming ``--log-level`` and the value for any other name."""
    if name not in LOG_LEVELS:
        raise ValueError(f"--log-level {name!r}: must be one of {', '.join(LOG_LEVELS)}")
    return int(getattr(logging, name.upper()))
