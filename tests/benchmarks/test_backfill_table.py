"""``make bench-backfill-cluster``'s table: a row per run, and each strategy's medians when it
ran on several streams (``benchmarks/backfill_cluster.py``)."""

from __future__ import annotations

from benchmarks.backfill_cluster import table


def row(strategy: str, seed: int, wait: float | None, idle: float, small: float) -> dict[str, object]:
    return {"strategy": strategy, "seed": seed, "wait": wait, "late": None if wait is None else 2.0,
            "reserved": None if wait is None or strategy != "Backfill" else 0.4, "idle": idle, "small": small,
            "smalls": 9}


def test_one_run_a_strategy_prints_its_rows_and_no_medians() -> None:
    lines = table([row("StrictFIFO", 1, 95.4, 5288, 42.8), row("Backfill", 1, 116.3, 1656, 8.9)],
                  ["StrictFIFO", "Backfill"], 600).splitlines()
    assert lines[0].split()[:4] == ["strategy", "seed", "wait", "(s)"]
    assert lines[1].split()[:7] == ["StrictFIFO", "1", "95", "2", "-", "5288", "43"]
    assert lines[2].split()[:7] == ["Backfill", "1", "116", "2", "0", "1656", "9"]
    assert len(lines) == 3


def test_the_medians_count_a_big_gang_that_never_started_as_the_timeout() -> None:
    rows = [row("StrictFIFO", 1, 95, 5000, 40), row("StrictFIFO", 2, None, 17000, 50),
            row("StrictFIFO", 3, 140, 6000, 45)]
    *_, median = table(rows, ["StrictFIFO"], 600).splitlines()
    assert median.split() == ["StrictFIFO", "median", "140", "2", "-", "6000", "45"]
