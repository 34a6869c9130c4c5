"""The one JSON log formatter both deployables use (troupe/logs.py): python-json-logger's,
with the keys the guide and the webhook's admission lines use (ts, level, logger, msg, the
caller's fields, exc)."""

from __future__ import annotations

import json
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

import reconciler.__main__ as reconciler_main
import webhook.logs
from troupe.logs import JSONFormatter, iso_timestamp


def record(message: str, *args: object, exc: bool = False, **fields: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad")
        except ValueError:
            exc_info = sys.exc_info()
    made = logging.LogRecord("troupe.reconciler", logging.WARNING, __file__, 1, message, args, exc_info)
    made.fields = fields
    return made


def test_the_webhook_and_the_reconciler_format_with_the_one_library_formatter() -> None:
    assert webhook.logs.JSONFormatter is reconciler_main.JSONFormatter is JSONFormatter
    assert issubclass(JSONFormatter, JsonFormatter)


def test_a_line_has_troupes_keys_in_order_with_the_fields_at_the_top_level() -> None:
    line = JSONFormatter().format(record("gang %s released", "ml/train", gang="ml/train", members=8))

    out = json.loads(line)

    assert "\n" not in line
    assert list(out) == ["ts", "level", "logger", "msg", "gang", "members"]
    assert out["level"] == "warning" and out["logger"] == "troupe.reconciler"
    assert out["msg"] == "gang ml/train released" and (out["gang"], out["members"]) == ("ml/train", 8)


def test_the_timestamp_is_the_records_in_utc_with_milliseconds() -> None:
    made = record("x")
    made.created = 1774087200.25

    out = json.loads(JSONFormatter().format(made))

    assert out["ts"] == "2026-03-21T10:00:00.250Z" == iso_timestamp(made.created)


def test_an_exception_is_the_exc_key_and_odd_values_still_make_one_json_object() -> None:
    out = json.loads(JSONFormatter().format(record("failed", exc=True, n=2**80, node="nœud", o=object())))

    assert "ValueError: bad" in out["exc"]
    assert out["n"] == 2**80 and out["node"] == "nœud" and out["o"].startswith("<object")
