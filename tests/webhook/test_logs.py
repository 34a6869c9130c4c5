"""JSON log lines: the formatter, and the admission line written straight to a descriptor."""

from __future__ import annotations

import json
import logging
import os

import pytest

from webhook.logs import ADMISSION_LOGGER, FdAdmissionLog, JSONFormatter, iso_timestamp, json_line


def test_a_timestamp_is_utc_with_milliseconds() -> None:
    assert iso_timestamp(0.25) == "1970-01-01T00:00:00.250Z"
    assert iso_timestamp(1774087200.999) == "2026-03-21T10:00:00.999Z"


def test_a_line_is_one_json_object_even_with_an_integer_beyond_64_bits() -> None:
    line = json_line({"uid": "u", "n": 2**80, "o": object()})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    out = json.loads(line)
    assert out["uid"] == "u" and out["n"] == 2**80 and out["o"].startswith("<object")


def test_the_formatter_puts_the_fields_and_the_traceback_in_the_object() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record = logging.LogRecord("troupe.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    record.fields = {"uid": "u-1"}
    out = json.loads(JSONFormatter().format(record))
    assert out["msg"] == "failed here" and out["level"] == "error" and out["logger"] == "troupe.x"
    assert out["uid"] == "u-1" and "ValueError: bad" in out["exc"]


def test_an_admission_line_is_written_whole_to_the_descriptor() -> None:
    r, w = os.pipe()
    try:
        FdAdmissionLog(w).write({"uid": "u-2", "outcome": "patched", "duration_ms": 0.4})
        out = json.loads(os.read(r, 65536))
    finally:
        os.close(r)
        os.close(w)
    assert out["logger"] == ADMISSION_LOGGER and out["msg"] == "admission" and out["level"] == "info"
    assert out["uid"] == "u-2" and out["outcome"] == "patched" and out["ts"].endswith("Z")


def test_a_failing_descriptor_never_fails_the_review() -> None:
    r, w = os.pipe()
    os.close(r)  # nobody reads: the write fails with EPIPE
    try:
        FdAdmissionLog(w).write({"uid": "u-3"})
    except OSError as e:
        pytest.fail(f"a log write failure reached the review: {e!r}")
    finally:
        os.close(w)
