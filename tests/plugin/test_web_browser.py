"""The topology map in a real browser (headless Chromium, tests/support/browser.py), served
by ``kubectl troupe topology --web`` from a snapshot: what a person sees.

- On the demo's snapshot (examples/snapshot.json): ml/train's cells are the nodes its pods
  run on, each coloured as its entry in the list of gangs on nodes; a waiting gang and its
  reason are listed, in queue order; a search for ml/train leaves only its cells lit and
  names its nodes; a click on a cell tells the node. The screenshot of the guide
  (docs/guide/topology-map.png) is taken here: ``TROUPE_UPDATE_GOLDEN=1`` writes it again.
- On a small snapshot where waiting gangs hold capacity under ``queueingStrategy: Backfill``
  (tests/support/held.py): the held nodes are outlined unlike reserved and nominated ones,
  a click tells for whom and from when, the waiting list gives the expected start.
- On a snapshot of 2,048 nodes: every node drawn, and the map built and laid out in far less
  than a second (the page's own measure; ``make bench-web`` measures the page's whole time).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import held
from tests.support.browser import Browser

REPO = Path(__file__).resolve().parents[2]
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
DEMO_SNAPSHOT = REPO / "examples" / "snapshot.json"
DEMO_NOW = "2026-11-23T12:08:44Z"
SCREENSHOT = REPO / "docs" / "guide" / "topology-map.png"
UPDATE = os.environ.get("TROUPE_UPDATE_GOLDEN") == "1"
DRAWN = "document.body.dataset.state === 'drawn'"


def serve(snapshot: Path, now: str, config: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """``kubectl troupe topology --web`` on ``snapshot`` (with the configuration file
    ``config``, when given): the process and the page's address."""
    name = snapshot.relative_to(REPO) if snapshot.is_relative_to(REPO) else snapshot  # as the guide shows it
    more = ["--config", str(config)] if config is not None else []
    proc = subprocess.Popen([str(PLUGIN), "topology", "--web", "--no-browser", "--snapshot", str(name), "--now", now, *more],
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


@contextlib.contextmanager
def page(browser: Browser, snapshot: Path, now: str, config: Path | None = None) -> Iterator[Browser]:
    """``browser`` on the page ``kubectl troupe topology --web`` serves of ``snapshot``, drawn;
    the server stopped on exit."""
    proc, url = serve(snapshot, now, config)
    try:
        browser.open(url)
        browser.wait_for(DRAWN)
        yield browser
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def demo(browser: Browser) -> Iterator[Browser]:
    with page(browser, DEMO_SNAPSHOT, DEMO_NOW) as drawn:
        yield drawn


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


def test_the_demos_idle_nodes_are_free_despite_their_daemonset_pods_and_the_notebooks_nodes_used(demo):
    items = json.loads(DEMO_SNAPSHOT.read_text())["items"]
    agents = {o["spec"]["nodeName"] for o in items if o["kind"] == "Pod"
              and o["metadata"].get("ownerReferences", [{}])[0].get("kind") == "DaemonSet"}
    assert len(agents) == 34  # a node-agent pod on every node
    notebooks = {o["spec"]["nodeName"] for o in items if o["kind"] == "Pod" and o["metadata"]["name"].startswith("notebook-")}
    drawn = dict(demo.evaluate("""Array.from(document.querySelectorAll('#map .c'),
        c => [c.dataset.node, c.classList.contains('e') ? 'free' : c.style.getPropertyValue('--g') ? 'gang' : 'other'])"""))
    assert {n for n, look in drawn.items() if look == "other"} == notebooks and len(notebooks) == 3
    assert drawn["gpu-b1-s1-h7"] == "free" and sum(look == "free" for look in drawn.values()) >= 8


def test_the_waiting_gangs_and_their_reasons_are_listed_in_queue_order(demo):
    items = demo.evaluate("Array.from(document.querySelectorAll('#waiting li'), li => li.innerText)")
    assert len(items) == 5
    assert items[0].startswith("ml/urgent") and "queue #1" in items[0]
    wide = next(text for text in items if text.startswith("ml/wide"))
    assert "Unschedulable" in wide and "fits 5 of 9 members in one cloud.google.com/gce-topology-subblock" in wide
    assert demo.evaluate("document.getElementById('waiting').checkVisibility()")


def test_the_namespace_filter_leaves_the_waiting_gangs_of_one_namespace(demo):
    demo.evaluate("window.troupeMap.namespace('infer')")
    try:
        items = demo.evaluate("Array.from(document.querySelectorAll('#waiting li'), li => li.dataset.gang)")
        assert items == ["infer/pod:llm-big-0"]
        assert demo.evaluate("document.getElementById('waiting-count').innerText") == "(1)"
        assert demo.evaluate("Array.from(document.getElementById('ns').options, o => o.value)") == [
            "", "infer", "ml", "research", "team-b"]
    finally:
        demo.evaluate("window.troupeMap.namespace('')")
    assert len(demo.evaluate("Array.from(document.querySelectorAll('#waiting li'))")) == 5


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


def big_snapshot() -> dict:
    """The benchmark's 2,048-node snapshot (``benchmarks/topology_map.py``): a DaemonSet pod
    (kube-system/agent-*, 100m CPU, 128 Mi) on every node, 411 Job gangs of namespace
    ``research`` on the first blocks (the first 100 Jobs' moved to namespace ``vision``) and
    five gated gangs of namespace ``ml`` that the plugin's decision places on the last blocks."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from simulate_snapshot import build_snapshot
        from topology_map import ganged
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    snapshot = ganged(build_snapshot(2048, 6000, 7))
    for o in snapshot["items"]:
        if o["kind"] == "Pod" and o["metadata"]["namespace"] == "research" and o["metadata"]["labels"]["job-name"] < "job-00100":
            o["metadata"]["namespace"] = "vision"
    return snapshot


@pytest.fixture(scope="module")
def big(browser: Browser, tmp_path_factory) -> Iterator[tuple[Browser, dict]]:
    """The page of :func:`big_snapshot` drawn, and the data it was drawn from."""
    path = tmp_path_factory.mktemp("big") / "snapshot.json"
    path.write_text(json.dumps(big_snapshot()))
    proc, url = serve(path, "2026-03-01T10:00:00Z")
    try:
        browser.open(url)
        browser.wait_for(DRAWN, timeout=60)
        yield browser, browser.evaluate("fetch('data.json').then(r => r.json())")
    finally:
        stop(proc)


def all_nodes(tree: dict) -> list[dict]:
    return [*tree.get("nodes", ()), *(n for c in tree.get("children", ()) for n in all_nodes(c))]


def test_a_2048_node_snapshot_is_drawn_far_within_a_second(big):
    browser, _ = big
    assert browser.evaluate("document.querySelectorAll('#map .c').length") == 2048
    draw_ms = float(browser.evaluate("document.body.dataset.drawMs"))
    assert draw_ms < 1000, f"the map of 2,048 nodes took {draw_ms} ms to build and lay out"
    assert "2048 nodes" in browser.evaluate("document.getElementById('summary').textContent")


def test_an_idle_node_with_a_daemonset_pod_is_drawn_free(big):
    browser, page = big
    idle = [n["name"] for n in all_nodes(page["tree"])
            if not n["holders"] and n["free"] == n["allocatable"] and n["ready"] and not n["cordoned"]]
    assert len(idle) > 500 and all(n["nodePods"] == 1 for n in all_nodes(page["tree"]))  # every node has its agent
    drawn = browser.evaluate(f"""(() => {{ const idle = new Set({json.dumps(idle)});
        return Array.from(document.querySelectorAll('#map .c'), c => [c.dataset.node, c.classList.contains('e'),
            getComputedStyle(c).backgroundImage, getComputedStyle(c).backgroundColor]).filter(x => idle.has(x[0])); }})()""")
    assert len(drawn) == len(idle)
    free = browser.evaluate("getComputedStyle(document.querySelector('#key .k-free')).backgroundColor")
    looks = {tuple(x[1:]) for x in drawn}
    assert looks == {(True, "none", free)}, looks  # the key's free colour, no grey


def main_namespaces(page: dict) -> dict[str, str]:
    """Node -> the namespace of the gang that uses the most units on it (the first such)."""
    out = {}
    for n in all_nodes(page["tree"]):
        if n["holders"]:
            out[n["name"]] = max(n["holders"], key=lambda h: h["units"])["gang"].split("/")[0]
    return out


def test_cells_take_their_namespaces_colour_and_hover_outlines_the_gang(big):
    browser, page = big
    drawn = browser.evaluate("Array.from(document.querySelectorAll('#map .c'), c => [c.dataset.node, c.style.getPropertyValue('--g')])")
    colours: dict[str, set[str]] = {}
    for node, ns in main_namespaces(page).items():
        colours.setdefault(ns, set()).add(dict(drawn)[node])
    colours = {ns: sorted(c) for ns, c in colours.items()}
    assert sorted(colours) == ["research", "vision"]
    assert all(len(v) == 1 for v in colours.values()) and colours["research"] != colours["vision"], colours
    swatch = browser.evaluate("""getComputedStyle(document.querySelector('#holding details[data-ns="vision"] summary .sw'))
        .backgroundColor""")
    assert swatch == browser.evaluate(f"""(() => {{ const s = document.createElement('i');
        s.style.background = {json.dumps(colours["vision"][0])}; document.body.append(s);
        const c = getComputedStyle(s).backgroundColor; s.remove(); return c; }})()""")
    cell = next(n for n in all_nodes(page["tree"]) if n["holders"] and n["name"].endswith("-00300"))
    gang = max(cell["holders"], key=lambda h: h["units"])["gang"]
    browser.evaluate(f"""document.querySelector('#map .c[data-node="{cell['name']}"]')
        .dispatchEvent(new MouseEvent('mouseover', {{bubbles: true}}))""")
    outlined = browser.evaluate("Array.from(document.querySelectorAll('#map .c.peer'), c => c.dataset.node)")
    holders = [n["name"] for n in all_nodes(page["tree"]) if any(h["gang"] == gang for h in n["holders"])]
    assert sorted(outlined) == sorted(holders) and len(holders) > 1


def test_the_gang_list_is_grouped_by_namespace_and_closed_when_long(big):
    browser, _ = big
    groups = browser.evaluate("""Array.from(document.querySelectorAll('#holding details'),
        d => [d.dataset.ns, d.open, d.querySelectorAll('li').length, d.querySelector('summary').innerText])""")
    assert [g[0] for g in groups] == ["ml", "research", "vision"] and not any(g[1] for g in groups)
    vision = {h["gang"] for n in all_nodes(big[1]["tree"]) for h in n["holders"] if h["gang"].startswith("vision/")}
    assert groups[2][2] == len(vision) > 90 and groups[2][3].startswith(f"vision · {len(vision)} gangs · ")
    assert groups[0][3] == "ml · 5 gangs · 664 nodes"  # planned: 512 + 64 + 64 + 16 + 8
    assert browser.evaluate("document.getElementById('holding').getBoundingClientRect().height") < 200
    vision = "document.querySelector('#holding details[data-ns=\"vision\"]')"
    browser.evaluate(vision + ".querySelector('summary').click()")
    browser.evaluate("window.troupeMap.reload()")  # the lists drawn again: the group the reader opened stays open
    assert browser.evaluate(vision + ".open") is True and int(browser.evaluate("document.body.dataset.draws")) == 1
    browser.evaluate(vision + ".querySelector('summary').click()")
    browser.evaluate("window.troupeMap.reload()")
    assert browser.evaluate(vision + ".open") is False


def test_the_namespace_filter_hides_other_namespaces(big):
    browser, _ = big
    browser.evaluate("""(() => { const s = document.getElementById('ns'); s.value = 'vision';
        s.dispatchEvent(new Event('change')); })()""")
    opacity = dict(browser.evaluate("Array.from(document.querySelectorAll('#map .c'), c => [c.dataset.node, getComputedStyle(c).opacity])"))
    seen = [(ns, opacity[node]) for node, ns in main_namespaces(big[1]).items()]
    assert {o for ns, o in seen if ns == "vision"} == {"1"} and {o for ns, o in seen if ns == "research"} == {"0.15"}
    assert browser.evaluate("Array.from(document.querySelectorAll('#holding details'), d => d.dataset.ns)") == ["vision"]
    assert browser.evaluate("location.hash") == "#ns=vision"
    browser.evaluate("window.troupeMap.namespace('')")
    assert browser.evaluate("document.querySelectorAll('#map .c.o').length") == 0
    assert browser.evaluate("Array.from(document.querySelectorAll('#holding details'), d => d.dataset.ns)") == [
        "ml", "research", "vision"]


def test_a_search_for_a_placed_gang_lights_its_planned_nodes_and_scrolls_to_them(big):
    browser, page = big
    planned = next(r for r in page["gangs"] if r["gang"] == "ml/probe-e")
    assert planned["phase"] == "Placed" and len(planned["nodes"]) == 8
    browser.evaluate("window.scrollTo(0, 0)")
    browser.evaluate("window.troupeMap.find('ml/probe-e')")
    lit = browser.evaluate("Array.from(document.querySelectorAll('#map .c.hit'), c => c.dataset.node)")
    assert sorted(lit) == planned["nodes"] and browser.evaluate("document.body.dataset.hits") == "8"
    assert "8 nodes planned: " in browser.evaluate("document.getElementById('detail').innerText")
    assert browser.evaluate("window.scrollY") > 0  # the plan is on the last blocks, below the fold
    top = browser.evaluate("document.querySelector('#map .c.hit').getBoundingClientRect().top")
    assert 0 < top < browser.evaluate("window.innerHeight")
    browser.evaluate("window.troupeMap.find('')")


@pytest.fixture(scope="module")
def reserved(browser: Browser, tmp_path_factory) -> Iterator[Browser]:
    """The page of tests/support/held.py's cluster under ``queueingStrategy: Backfill``."""
    folder = tmp_path_factory.mktemp("held")
    path = folder / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": held.objects()}))
    config = folder / "config.yaml"
    config.write_text("queueingStrategy: Backfill\n")
    with page(browser, path, held.NOW, config) as drawn:
        yield drawn


def test_nodes_held_for_waiting_gangs_are_outlined_and_say_for_whom_and_from_when(reserved):
    """ml/big reserves gpu-b0-s0 from 10:02:00, team/big gpu-b0-s1 with no known start
    (docs/decisions/079-reservation-at-earliest-start-and-backfill.md)."""
    drawn = dict(reserved.evaluate("""Array.from(document.querySelectorAll('#map .c'),
        c => [c.dataset.node, [c.classList.contains('hd'), getComputedStyle(c).outlineStyle]])"""))
    assert drawn == {name: [True, "solid"] for name in held.S0 + held.S1}
    looks = {(k, reserved.evaluate(f"getComputedStyle(document.querySelector('#key .c.{k}')).outlineStyle"))
             for k in ("r", "m", "hd")}
    assert looks == {("r", "dashed"), ("m", "dotted"), ("hd", "solid")}, "held is drawn unlike reserved and nominated"
    reserved.evaluate(f"document.querySelector('#map .c[data-node=\"{held.S0[0]}\"]').click()")
    assert "held for ml/big (reserved from 10:02:00)" in reserved.evaluate("document.getElementById('detail').innerText")
    reserved.evaluate(f"document.querySelector('#map .c[data-node=\"{held.S1[0]}\"]').click()")
    assert "held for team/big (reserved, from when a pod without a time limit ends)" in reserved.evaluate(
        "document.getElementById('detail').innerText")
    items = dict(reserved.evaluate("Array.from(document.querySelectorAll('#waiting li'), li => [li.dataset.gang, li.innerText])"))
    assert "expected start 10:02:00" in items["ml/big"] and "start not known" in items["team/big"]
    reserved.evaluate("window.troupeMap.find('ml/big')")
    assert sorted(reserved.evaluate("Array.from(document.querySelectorAll('#map .c.hit'), c => c.dataset.node)")) == held.S0
    assert "2 nodes held for it: " in reserved.evaluate("document.getElementById('detail').innerText")
    reserved.evaluate("window.troupeMap.find('')")
