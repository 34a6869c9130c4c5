"""What the scale benchmark prints (``benchmarks/scale_report.py``): the subblocks and
blocks a Job spans, the fewest that hold it, the ratios to the plain Job and the summary
table, from measured runs given as data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from scale_report import (
    Run,
    SizeResult,
    fewest_subblocks,
    ratio,
    size_lines,
    span,
    summary_table,
    target_rows,
)

HOSTS = 64


def nodes(count: int, first_subblock: int = 0) -> tuple[str, ...]:
    """``count`` nodes filling whole subblocks of 64 hosts in order (8 subblocks a block)."""
    return tuple(f"gpu-b{(first_subblock + i // HOSTS) // 8}-s{(first_subblock + i // HOSTS) % 8}-h{i % HOSTS}"
                 for i in range(count))


def test_span_counts_distinct_subblocks_and_blocks():
    assert span(["gpu-b0-s0-h1", "gpu-b0-s0-h2"]) == (1, 1)
    assert span(nodes(256)) == (4, 1)
    assert span(nodes(256, first_subblock=6)) == (4, 2)  # b0-s6, b0-s7, b1-s0, b1-s1
    assert span(["gpu-b0-s1-h3", "gpu-b1-s1-h3"]) == (2, 2)  # same subblock index, other block


@pytest.mark.parametrize(("n", "fewest"), [(1, 1), (64, 1), (65, 2), (256, 4), (512, 8), (1024, 16)])
def test_fewest_subblocks_is_n_over_hosts_rounded_up(n, fewest):
    assert fewest_subblocks(n, HOSTS) == fewest


def test_fewest_subblocks_refuses_a_subblock_without_hosts():
    with pytest.raises(ValueError, match="positive"):
        fewest_subblocks(64, 0)


def result(n: int, runs: dict[str, Run]) -> SizeResult:
    return SizeResult(n, runs, reconciler_peak_mib=123.4)


def test_ratio_is_to_the_plain_job_and_absent_without_it():
    measured = result(64, {"plain": Run(4.0, None, nodes(64)), "AsCreated": Run(4.4, 0.5, nodes(64))})

    assert ratio(measured, "AsCreated") == pytest.approx(1.1)
    assert ratio(measured, "WhenComplete") is None
    assert ratio(result(64, {"AsCreated": Run(4.4, 0.5, nodes(64))}), "AsCreated") is None


def test_summary_table_has_a_row_per_size_with_times_ratios_releases_and_spans():
    results = [
        result(64, {"plain": Run(4.44, None, nodes(64, first_subblock=1)[:30] + nodes(34, first_subblock=9)),
                    "AsCreated": Run(4.8, 0.31, nodes(64)), "WhenComplete": Run(9.26, 1.52, nodes(64))}),
        result(256, {"plain": Run(16.0, None, nodes(256, first_subblock=6)),
                     "AsCreated": Run(17.6, 0.4, nodes(256)), "WhenComplete": Run(32.0, 6.7, nodes(256))}),
    ]

    table = summary_table(results, ["plain", "AsCreated", "WhenComplete"], HOSTS).splitlines()

    assert table[0] == ("| N | plain s | AsCreated s | WhenComplete s | AsCreated/plain | WhenComplete/plain "
                        "| release AsCreated s | release WhenComplete s "
                        "| subblocks plain / AsCreated / WhenComplete (fewest) | reconciler peak MiB |")
    assert table[1] == "| " + " | ".join(["---"] * 10) + " |"
    assert table[2] == "| 64 | 4.44 | 4.80 | 9.26 | 1.08x | 2.09x | 0.31 | 1.52 | 2 (2 blocks) / 1 / 1 (1) | 123 |"
    assert table[3] == "| 256 | 16.0 | 17.6 | 32.0 | 1.10x | 2.00x | 0.40 | 6.70 | 4 (2 blocks) / 4 / 4 (4) | 123 |"
    assert len(table) == 4


def test_summary_table_of_a_subset_of_modes_has_no_ratio_without_plain():
    results = [result(64, {"AsCreated": Run(4.8, None, nodes(64))})]

    table = summary_table(results, ["AsCreated"], HOSTS).splitlines()

    assert table[0] == "| N | AsCreated s | release AsCreated s | subblocks AsCreated (fewest) | reconciler peak MiB |"
    assert table[2] == "| 64 | 4.80 | n/a | 1 (1) | 123 |"


def test_size_lines_give_each_mode_its_ratio_release_and_span():
    measured = result(512, {"plain": Run(25.3, None, nodes(512, first_subblock=4)),
                            "WhenComplete": Run(55.3, 6.71, nodes(512))})

    assert size_lines(measured, HOSTS) == [
        "N=512",
        "  plain           25.3 s to all Running, 8 (2 blocks) subblocks",
        "  WhenComplete    55.3 s to all Running, 2.19x of plain, release 6.71 s, 8 subblocks",
        "  fewest subblocks that hold 512: 8; reconciler peak memory 123 MiB",
    ]


def test_a_run_whose_pods_were_recreated_is_marked_in_the_lines_and_the_table():
    measured = result(256, {"plain": Run(16.0, None, nodes(256)),
                            "AsCreated": Run(70.0, 0.4, nodes(256), recreated=256)})

    assert size_lines(measured, HOSTS)[2] == ("  AsCreated       70.0 s to all Running, 4.38x of plain, release 0.40 s, "
                                              "4 subblocks (256 pods recreated: a rollback)")
    table = summary_table([measured], ["plain", "AsCreated"], HOSTS).splitlines()
    assert table[2] == "| 256 | 16.0 | 70.0* | 4.38x | 0.40 | 4 / 4 (4) | 123 |"
    assert table[-1] == "\\* pods recreated on the way (a gang rolled back): not a clean run"


def test_the_target_rows_hold_each_gang_mode_to_the_plain_job_and_as_created_to_1_1x():
    result = SizeResult(64, {"plain": Run(2.0, None, nodes(64)), "AsCreated": Run(2.1, 0.3, nodes(64)),
                             "WhenComplete": Run(4.0, 1.0, nodes(64))}, 300.0)
    rows = target_rows([result], "2,048 kwok nodes")
    assert rows == [
        ("gang of 64 to all Running (AsCreated, 1 subblocks), 2,048 kwok nodes", "2.10 s", "2.00 s (plain Job)", "1.05x",
         "< 1.1x: met"),
        ("gang of 64 to all Running (WhenComplete, 1 subblocks), 2,048 kwok nodes", "4.00 s", "2.00 s (plain Job)", "2.00x",
         "-"),
    ]
    slow = SizeResult(64, {"plain": Run(2.0, None, nodes(64)), "AsCreated": Run(2.4, 0.3, nodes(64))}, 300.0)
    assert target_rows([slow], "here")[0][4] == "< 1.1x: NOT met"
