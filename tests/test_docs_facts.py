"""Facts the README and the results page state, held to the code and to each other: "How it
works" names exactly the workload kinds Troupe sizes gangs from
(:data:`reconciler.engine.model.workloads.KINDS`), and each benchmark is stated once on
each page, the README's summary giving the results page's figures."""

from __future__ import annotations

import re
from pathlib import Path

from reconciler.engine.model.workloads import KINDS
from tests.support.markdown import section

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "guide" / "results.md"
#: What "How it works" names beside the workload kinds: pods with Troupe's keys and no workload.
PLAIN_PODS = "plain pods"
#: A figure with its unit (``45 ms``, ``8.8 s``, ``379 MiB``, ``3.6x``, ``74%``).
FIGURE = re.compile(r"\d[\d,.]*(?:\s?(?:ms|s|MiB|GiB|%)|x)(?!\w)")


def rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``text``, header and ``|---|`` lines left out."""
    found = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[-| :]*\|", line):
            found.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [cells for cells in found if cells[0] not in ("what", "", "fault")]


def same(text: str) -> str:
    """``text`` as a sentence: code marks dropped, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def test_how_it_works_names_every_integrated_workload_kind_and_no_other() -> None:
    diagram = section(README.read_text(), "## How it works", until="## ")
    match = re.search(r"kubectl apply \(([^)]*)\)", diagram)
    assert match, "the diagram of 'How it works' has no 'kubectl apply (...)'"
    named = {name.strip() for name in match.group(1).split(",")}

    assert named - {PLAIN_PODS} == {kind.kind for kind in KINDS}
    assert PLAIN_PODS in named


def test_each_benchmark_is_stated_once_on_the_results_page() -> None:
    what = [same(cells[0]) for cells in rows(RESULTS.read_text())]
    assert len(what) > 20
    assert sorted({w for w in what if what.count(w) > 1}) == []


def test_each_benchmark_is_stated_once_in_the_readmes_summary() -> None:
    what = [same(cells[0]) for cells in rows(section(README.read_text(), "## Measured (two cores)", until="## "))]
    assert len(what) > 5
    assert sorted({w for w in what if what.count(w) > 1}) == []


def test_the_readmes_summary_gives_the_results_pages_figures() -> None:
    """A figure of the README's summary that the results page does not give is one of two
    measurements of the same benchmark: the page, which says how it was measured, is the
    one to keep current."""
    results = same(RESULTS.read_text())
    summary = rows(section(README.read_text(), "## Measured (two cores)", until="## "))
    absent = {cells[0]: [f for f in FIGURE.findall(same(cells[1])) if f not in results] for cells in summary}
    assert {what: figures for what, figures in absent.items() if figures} == {}
