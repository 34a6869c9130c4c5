"""The topology map at 2,048 and 8,192 nodes: what its data costs and how fast the page draws.

    .venv/bin/python benchmarks/topology_map.py [--nodes N ...] [--pods N] [--repeat N]

The snapshot is the simulator benchmark's (``benchmarks/simulate_snapshot.py``: GKE nodes of
8 GPUs, a daemon pod per node, Job pods bound to the first blocks, five waiting gangs of
512, 64, 64, 16 and 8 gated members), with every Job's pods made a gang of their own
(``troupe.io/gang-name``, ``-size``), so that the map has thousands of gangs to colour.

Timed, for each ``--nodes``:

- **data, kubectl**: ``kubectl troupe topology --web``'s page data of the snapshot once read
  (:func:`reconciler.tools.web.local.cluster_page`: the tree, every gang decided, the marks)
  and its JSON (:func:`reconciler.tools.web.server.encode`), best of ``--repeat``;
- **data, reconciler**: what ``/topology/data.json`` costs the reconciler
  (:func:`reconciler.run.topology.page` and the JSON) on a cache holding the same
  objects: *cold* (the cache's snapshot built first, as after a change) and *warm* (the
  snapshot unchanged, as between changes), best of ``--repeat``;
- **page**: headless Chromium (``tests/support/browser.py``) loads the page from a local
  server and reports, from the page itself: ``fetch`` (the data read and parsed), ``draw``
  (the map built and laid out), ``frame`` (to the next frame) and ``ready`` (navigation
  start to the first draw, everything included); median of ``--repeat`` loads, and a
  search for one gang.

Target: the page draws 2,048 nodes in under 1 s (``ready``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulate_snapshot import build_snapshot, progress

from reconciler.tools import plugin
from reconciler.tools.web import local, server
from tests.support.browser import Browser

NOW = "2026-03-01T10:00:00Z"
TARGET_MS = 1000.0


def ganged(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with every Job pod outside a gang made a member of its Job's gang."""
    pods = [o for o in snapshot["items"] if o["kind"] == "Pod"]
    jobs = Counter(p["metadata"]["labels"].get("job-name") for p in pods if p["metadata"]["namespace"] == "research")
    for p in pods:
        job = p["metadata"]["labels"].get("job-name")
        if p["metadata"]["namespace"] == "research" and job:
            p["metadata"]["annotations"] = {"troupe.io/gang-name": job, "troupe.io/gang-size": str(jobs[job])}
    return snapshot


def best(repeat: int, run: Any) -> tuple[float, Any]:
    """The least wall time of ``repeat`` runs of ``run()``, ms, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), out


def reconciler_cost(objects: list[dict[str, Any]], repeat: int) -> tuple[float, float]:
    """``(cold, warm)`` ms of the reconciler's page data on a cache of ``objects``."""
    from kubernetes import client

    from reconciler.run import topology as reconciler_map
    from reconciler.run.reconciler import Reconciler
    from troupe.config import Config

    rec = Reconciler(client.ApiClient(), Config())  # nothing started: no request is made
    try:
        rec.cache.replace_nodes([rec.cache.retain_node(o) for o in objects if o["kind"] == "Node"])
        pods = [rec.cache.retain_pod(o) for o in objects if o["kind"] == "Pod"]
        colds = []
        for i in range(repeat):
            rec.cache.replace_pods(pods[i % 2:])  # a change: the next snapshot is built anew
            start = time.perf_counter()
            server.encode(reconciler_map.page(rec))
            colds.append((time.perf_counter() - start) * 1000)
        warm, _ = best(repeat, lambda: server.encode(reconciler_map.page(rec)))
        return min(colds), warm
    finally:
        rec.writes.close()


def page_times(page: dict[str, Any], repeat: int, search: str) -> dict[str, float]:
    """Median times the page reports over ``repeat`` loads of ``page`` (ms), and a search's."""
    cached = server.CachedData(lambda: page, ttl=1e9)
    httpd = make_server("127.0.0.1", 0, server.wsgi(cached), handler_class=local.QuietHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    runs: dict[str, list[float]] = {"fetch": [], "draw": [], "frame": [], "ready": [], "search": []}
    try:
        with Browser() as browser:
            for _ in range(repeat + 1):  # the first load warms the browser's caches: not counted
                browser.open(f"http://127.0.0.1:{httpd.server_port}{server.PREFIX}/")
                browser.wait_for("document.body.dataset.state === 'drawn' && document.body.dataset.frameMs", 60)
                times = browser.evaluate("JSON.stringify(document.body.dataset)")
                found = browser.evaluate(f"window.troupeMap.find({orjson.dumps(search).decode()})")
                data = orjson.loads(times)
                for key in ("fetch", "draw", "frame", "ready"):
                    runs[key].append(float(data[f"{key}Ms"]))
                runs["search"].append(float(found))
            cells = browser.evaluate("document.querySelectorAll('#map .c').length")
    finally:
        httpd.shutdown()
        httpd.server_close()
    out = {key: statistics.median(values[1:]) for key, values in runs.items()}
    out["cells"] = cells
    return out


def measure(n_nodes: int, n_pods: int, repeat: int) -> None:
    progress(f"{n_nodes} nodes, {n_pods} pods: building the snapshot")
    snapshot = ganged(build_snapshot(n_nodes, n_pods, 7))
    with tempfile.TemporaryDirectory(prefix="troupe-map-") as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_bytes(orjson.dumps(snapshot))
        args = plugin.parser().parse_args(["topology", "--snapshot", str(path), "--now", NOW])
        cluster = plugin.load(args)[0]
        kubectl_ms, page = best(repeat, lambda: local.cluster_page(cluster, "nvidia.com/gpu", 5.0))
        encode_ms, body = best(repeat, lambda: server.encode(page))
    progress("the reconciler's data")
    cold, warm = reconciler_cost(snapshot["items"], repeat)
    progress("the page in headless Chromium")
    times = page_times(page, repeat, "research/job-00010")
    ok = "ok" if times["ready"] < TARGET_MS else "OVER"
    print(f"{n_nodes:>6} nodes {n_pods:>6} pods {page['summary']['gangs']:>5} gangs  data {len(body) / 1e6:.2f} MB\n"
          f"  data, kubectl:    {kubectl_ms:7.1f} ms page data + {encode_ms:6.1f} ms JSON\n"
          f"  data, reconciler: {cold:7.1f} ms cold (snapshot built) / {warm:6.1f} ms warm, JSON included\n"
          f"  page ({times['cells']} cells): fetch {times['fetch']:.1f} ms, draw {times['draw']:.1f} ms, "
          f"frame {times['frame']:.1f} ms, ready {times['ready']:.1f} ms ({ok}: target {TARGET_MS:.0f} ms at 2,048); "
          f"search {times['search']:.1f} ms", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2048, 8192], help="cluster sizes (default %(default)s)")
    parser.add_argument("--pods", type=int, default=20000, help="pods, gang members included (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing (default %(default)s)")
    args = parser.parse_args(argv)
    for n in args.nodes:
        measure(n, args.pods, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
