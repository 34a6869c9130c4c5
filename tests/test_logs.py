"""The one JSON log formatter both deployables use (troupe/logs.py): python-json-logger's,
with the keys the guide and the webhook's admission lines use (ts, level, logger, msg, the
caller's fields, exc)."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest
from pythonjsonlogger.json import JsonFormatter

import reconciler.__main__ as reconciler_main
import webhook.logs
from troupe.logs import LOG_LEVELS, JSONFormatter, iso_timestamp, log_level


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


# --- --log-level, both deployables ------------------------------------------------------------


def test_each_log_level_name_is_the_standard_librarys_level_and_any_other_is_refused_naming_the_flag() -> None:
    assert [log_level(n) for n in LOG_LEVELS] == [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR]
    with pytest.raises(ValueError, match=r"--log-level 'verbose': must be one of debug, info, warning, error"):
        log_level("verbose")


@pytest.mark.parametrize(("argv", "want"), [
    ([], logging.INFO), (["--log-level", "warning"], logging.WARNING), (["--log-level", "error"], logging.ERROR),
    (["--log-level", "debug"], logging.DEBUG), (["-v"], logging.DEBUG),
])
def test_the_reconciler_logs_from_its_log_level_up(argv: list[str], want: int) -> None:
    args = reconciler_main._parser().parse_args(["run", *argv])
    root = logging.getLogger()
    saved = (root.level, root.handlers[:])
    try:
        reconciler_main.configure_logging(args)
        assert root.level == want
        assert logging.getLogger("urllib3").level == max(want, logging.WARNING)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        logging.getLogger("urllib3").setLevel(logging.WARNING)


@pytest.mark.parametrize("level", ["warning", "error"])
def test_the_webhook_above_info_sets_its_loggers_and_writes_no_admission_line(level: str) -> None:
    from gunicorn.config import Config as GunicornConfig

    cfg = GunicornConfig()
    cfg.set("loglevel", level)
    troupe_logger = logging.getLogger("troupe")
    saved = troupe_logger.level
    try:
        webhook.logs.GunicornJSONLogger(cfg)
        assert troupe_logger.level == log_level(level)
    finally:
        troupe_logger.setLevel(saved)
    r, w = os.pipe()
    try:
        webhook.logs.FdAdmissionLog(w, log_level(level)).write({"uid": "u"})
        webhook.logs.FdAdmissionLog(w, logging.INFO).write({"uid": "written"})
        out = os.read(r, 65536)
    finally:
        os.close(r)
        os.close(w)
    assert [json.loads(line)["uid"] for line in out.splitlines()] == ["written"]


def test_the_webhook_serve_command_passes_its_log_level_on(tmp_path) -> None:
    from tests.support.webhook_builders import make_tls
    from webhook import cli

    tls = make_tls(tmp_path)
    args = cli.parser().parse_args(["serve", "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--bind",
                                    "127.0.0.1:0", "--log-level", "error"])
    assert cli._serve_options(args).log_level == "error"
    default = cli.parser().parse_args(["serve", "--tls-cert", str(tls.cert), "--tls-key", str(tls.key)])
    assert default.log_level == "info"
