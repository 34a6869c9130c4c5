"""What the stream benchmark prints (``benchmarks/stream_report.py``): nearest-rank
percentiles, the queue-order inversions and the summary table, from measured streams given
as data."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from stream_report import StreamResult, inversions, percentile, ratio, summary_table


def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
    assert percentile([1.0, 2.0], 99) == 2.0


@pytest.mark.parametrize(("values", "q", "message"), [([], 50, "percentile of no values"),
                                                      ([1.0], 0, "q must be in"), ([1.0], 101, "q must be in")])
def test_percentile_refuses(values, q, message):
    with pytest.raises(ValueError, match=message):
        percentile(values, q)


def test_inversions_count_pairs_running_out_of_creation_order():
    assert inversions([0, 1, 2, 3], [1, 2, 3, 4]) == 0
    assert inversions([0, 1, 2, 3], [4, 3, 2, 1]) == 6
    assert inversions([0, 1, 2], [1.0, 0.5, 2.0]) == 1
    assert inversions([0, 1], [1.0, 1.0]) == 0  # a tie is no inversion


def test_inversions_follow_the_creation_times_not_the_list_order():
    # listed out of creation order: created 2, 0, 1 and Running in that same order
    assert inversions([2.0, 0.0, 1.0], [3.0, 1.0, 2.0]) == 0


def test_a_job_never_running_is_after_every_job_that_ran():
    assert inversions([0, 1, 2], [None, 1.0, 2.0]) == 2
    assert inversions([0, 1, 2], [1.0, 2.0, None]) == 0


def test_inversions_match_the_pairwise_count():
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(0, 40)
        created = [rng.random() for _ in range(n)]
        running = [None if rng.random() < 0.1 else float(rng.randint(0, 10)) for _ in range(n)]
        keys = [float("inf") if r is None else r for r in running]
        expected = sum(1 for i, j in itertools.permutations(range(n), 2)
                       if created[i] < created[j] and keys[j] < keys[i])
        assert inversions(created, running) == expected


def test_inversions_need_as_many_times_on_each_side():
    with pytest.raises(ValueError, match="created has 2 Jobs, running 1"):
        inversions([0.0, 1.0], [1.0])


def test_stream_result_times_from_each_creation():
    result = StreamResult("gang", (0.0, 1.0, 2.0), (1.5, 2.25, None))
    assert result.to_running == [1.5, 1.25]
    assert result.all_running == 2
    assert result.stat(50) == 1.25 and result.stat(100) == 1.5
    assert StreamResult("gang", (0.0,), (None,)).stat(50) is None


def test_summary_table_has_a_row_per_mode_and_the_ratios():
    plain = StreamResult("plain", (0.0, 1.0, 2.0, 3.0), (1.0, 2.0, 3.0, 4.0))
    gang = StreamResult("gang", (0.0, 1.0, 2.0, 3.0), (1.05, 3.5, 3.05, 4.05))
    assert ratio(gang, plain, 50) == pytest.approx(1.05)
    lines = summary_table([plain, gang]).splitlines()
    assert lines[0].startswith("| mode | all Running | median s | p99 s | max s |")
    assert lines[2] == "| plain | 4 of 4 | 1.00 | 1.00 | 1.00 | n/a | n/a | 0 (6) | 3.0 |"
    assert lines[3] == "| gang | 4 of 4 | 1.05 | 2.50 | 2.50 | n/a | n/a | 1 (6) | 3.0 |"
    assert lines[4] == "| gang / plain |  | 1.05x (within 1.1x) | 2.50x (NOT within 1.1x) |  |  |  |  |  |"


def test_summary_table_of_one_mode_has_no_ratio_row():
    lines = summary_table([StreamResult("gang", (0.0,), (None,))]).splitlines()
    assert lines[2] == "| gang | 0 of 1 | n/a | n/a | n/a | n/a | n/a | 0 (0) | 0.0 |"
    assert len(lines) == 3


def test_the_median_splits_into_creation_and_running():
    result = StreamResult("gang", (0.0, 1.0, 2.0), (1.5, 2.5, None), complete=(0.25, 1.5, 2.75))
    assert result.split(50) == (0.5, 1.0)  # created after 0.25, 0.5, 0.75 s; Running 1.25, 1.0 s later
    assert StreamResult("plain", (0.0,), (1.0,)).split(50) == (None, None)
    line = summary_table([result]).splitlines()[2]
    assert line == "| gang | 2 of 3 | 1.50 | 1.50 | 1.50 | 0.50 | 1.00 | 0 (3) | 2.0 |"
