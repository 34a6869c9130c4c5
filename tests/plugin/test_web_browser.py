"""The topology map in a real browser (headless Chromium, tests/support/browser.py), served
by ``kubectl troupe topology --web`` from a snapshot: what a person sees.

- On the demo's snapshot (examples/snapshot.json): ml/train's cells are the nodes its pods
  run on, each coloured as its entry in the list of gangs on nodes; a waiting gang and its
  reason are listed, in queue order; a search for ml/train leaves only its cells lit and
  names its nodes; a click on a cell tells the node. The screenshot of the guide
  (docs/guide/topology-map.png) is taken here: ``TROUPE_UPDATE_GOLDEN=1`` writes it again.
- On a snapshot of 2,048 nodes: every node drawn, and the map built and laid out in far less
  than a second (the page's own measure; ``make bench-web`` measures the page's whole time).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import Browser

REPO = Path(__file__).resolve().parents[2]
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
DEMO_SNAPSHOT = REPO / "examples" / "snapshot.json"
DEMO_NOW = "2026-11-23T12:08:44Z"
SCREENSHOT = REPO / "docs" / "guide" / "topology-map.png"
UPDATE = os.environ.get("TROUPE_UPDATE_GOLDEN") == "1"
DRAWN = "document.body.dataset.state === 'drawn'"


def serve(snapshot: Path, now: str) -> tuple[subprocess.Popen[str], str]:
    """``kubectl troupe topology --web`` on ``snapshot``: the process and the page's address."""
    name = snapshot.relative_to(REPO) if snapshot.is_relative_to(REPO) else snapshot  # as the guide shows it
    proc = subprocess.Popen([str(PLUGIN), "topology", "--web", "--no-browser", "--snapshot", str(name), "--now", now],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    line = proc.stdout.readline() if proc.stdout else ""
    found = re.search(r"http://127\.0\.0\.1:\d+/topology/\?token=[A-Za-z0-9_-]+", line)
    if not found:
        proc.kill()
        raise AssertionError(f"no address printed: {line!r} {proc.communicate()[1]}")
    return proc, found.group(0)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 130


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(width=1400, height=900) as running:
        yield running


@pytest.fixture(scope="module")
def demo(browser: Browser) -> Iterator[Browser]:
    proc, url = serve(DEMO_SNAPSHOT, DEMO_NOW)
    try:
        browser.open(url)
        browser.wait_for(DRAWN)
        yield browser
    finally:
        stop(proc)


def pods_on_nodes(namespace: str, gang: str) -> list[str]:
    items = json.loads(DEMO_SNAPSHOT.read_text())["items"]
    return sorted(o["spec"]["nodeName"] for o in items if o["kind"] == "Pod" and o["metadata"]["namespace"] == namespace
                  and (o["metadata"].get("annotations") or {}).get("troupe.io/gang-name") == gang)


def test_a_gangs_cells_are_where_its_pods_run(demo):
    cells = demo.evaluate("""Array.from(document.querySelectorAll('#map .c[title*="ml/train"]'),
        c => [c.dataset.node, getComputedStyle(c).backgroundImage])""")
    assert sorted(node for node, _ in cells) == pods_on_nodes("ml", "train") == [f"gpu-b0-s0-h{i}" for i in range(8)]
    swatch = demo.evaluate("""getComputedStyle(document.querySelector('#holding li[data-gang="ml/train"] .sw'))
        .backgroundColor""")
    assert all(swatch in background for _, background in cells), (swatch, cells[0])  # coloured as its entry
    assert demo.evaluate("document.querySelectorAll('#map .c').length") == 34
    assert "34 nodes" in demo.evaluate("document.getElementById('summary').textContent")


def test_the_waiting_gangs_and_their_reasons_are_listed_in_queue_order(demo):
    items = demo.evaluate("Array.from(document.querySelectorAll('#waiting li'), li => li.innerText)")
    assert len(items) == 5
    assert items[0].startswith("ml/urgent") and "queue #1" in items[0]
    wide = next(text for text in items if text.startswith("ml/wide"))
    assert "Unschedulable" in wide and "fits 5 of 9 members in one cloud.google.com/gce-topology-subblock" in wide
    assert demo.evaluate("document.getElementById('waiting').checkVisibility()")


def test_a_search_lights_only_the_gangs_cells_and_names_its_nodes(demo):
    demo.evaluate("(() => { const s = document.getElementById('search'); s.value = 'ml/train';"
                  " s.dispatchEvent(new Event('input')); })()")
    demo.wait_for("document.querySelectorAll('#map .c.hit').length > 0")
    lit = demo.evaluate("Array.from(document.querySelectorAll('#map .c.hit'), c => c.dataset.node)")
    assert sorted(lit) == pods_on_nodes("ml", "train")
    detail = demo.evaluate("document.getElementById('detail').innerText")
    assert "ml/train" in detail and "Released" in detail and "8 nodes: gpu-b0-s0-h0" in detail
    assert demo.evaluate("location.hash") == "#gang=ml%2Ftrain"
    demo.evaluate("window.troupeMap.find('')")
    assert demo.evaluate("document.querySelectorAll('#map .c.hit').length") == 0


def test_a_hand_typed_address_with_a_lone_percent_still_loads_the_page(demo):
    address = demo.evaluate("location.href").split("?")[0].split("#")[0]
    demo.open(address + "?again=1#gang=%")  # a load of its own (the token is in the cookie by now)
    demo.wait_for(DRAWN)
    assert demo.evaluate("document.getElementById('search').value") == "%"
    demo.evaluate("window.troupeMap.find('')")


def test_a_click_on_a_cell_tells_the_node(demo):
    demo.evaluate("document.querySelector('#map .c[data-node=\"shared-0\"]').click()")
    detail = demo.evaluate("document.getElementById('detail').innerText")
    assert "shared-0" in detail and "6 of 8 nvidia.com/gpu free" in detail and "group:llm-a" in detail


def test_the_guide_screenshot(demo, tmp_path):
    demo.evaluate("window.troupeMap.find('')")
    demo.evaluate("document.querySelector('#map .c[data-node=\"gpu-b0-s1-h1\"]').click()")
    target = SCREENSHOT if UPDATE else tmp_path / "topology-map.png"
    demo.screenshot(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000
    assert SCREENSHOT.exists(), "docs/guide/topology-map.png missing: TROUPE_UPDATE_GOLDEN=1 writes it"


def test_a_2048_node_snapshot_is_drawn_far_within_a_second(browser, tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from simulate_snapshot import build_snapshot
        from topology_map import ganged
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(ganged(build_snapshot(2048, 6000, 7))))
    proc, url = serve(path, "2026-03-01T10:00:00Z")
    try:
        browser.open(url)
        browser.wait_for(DRAWN, timeout=60)
        assert browser.evaluate("document.querySelectorAll('#map .c').length") == 2048
        draw_ms = float(browser.evaluate("document.body.dataset.drawMs"))
        assert draw_ms < 1000, f"the map of 2,048 nodes took {draw_ms} ms to build and lay out"
        assert "2048 nodes" in browser.evaluate("document.getElementById('summary').textContent")
    finally:
        stop(proc)
