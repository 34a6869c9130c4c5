"""What the demo's scenarios act on: the cluster, kubectl, the narration and the waits.

:class:`Stage` is one cluster (the local one the demo starts, or an existing one given by
``--kubeconfig``) with an admin API client, the kubectl that shows users' commands, Troupe's
configuration in effect, and :class:`Layout`, the topology the scenarios place gangs in,
read from the nodes' labels. A scenario narrates through :meth:`Stage.say` and
:meth:`Stage.show` (a command and its output, as a user would type and see it) and checks
what it shows with :meth:`Stage.expect` and :meth:`Stage.wait`, which raise
:class:`DemoFailure` naming what did not happen and where the logs are.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from troupe import contract
from troupe.config import Config

T = TypeVar("T")

GPU = "nvidia.com/gpu"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: Every object the demo creates carries this label, so a later run finds leftovers.
DEMO_LABEL = "troupe.dev/demo"
#: Poll interval of :meth:`Stage.wait`, seconds.
POLL_SECONDS = 0.25


class DemoFailure(RuntimeError):
    """A scenario did not show what it should have; the message says what, with the last
    state seen and where the logs are."""


class Unsuitable(RuntimeError):
    """The cluster lacks what the demo needs; the message lists each missing thing."""


# --------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class Subblock:
    """One subblock the scenarios use: its block, its name and its first ``hosts`` nodes,
    in topology order (host label, then node name)."""

    block: str
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """The topology the scenarios use, read from the nodes (:func:`read_layout`).

    ``subblocks``: four subblocks, two in each of two blocks (``[0]``, ``[1]`` in the first
    block), each with ``hosts`` nodes of ``gpus`` whole GPUs (``nvidia.com/gpu``
    allocatable, a whole-node member asks all of them). ``shared``: the Ready nodes
    labelled ``deviceshare.io/mode: shared`` with GPUs. ``node_count``: every node.
    """

    subblocks: tuple[Subblock, Subblock, Subblock, Subblock]
    hosts: int
    gpus: int
    shared: tuple[str, ...]
    node_count: int
    subblock_label: str
    block_label: str

    def subblock_of(self, node: str) -> str | None:
        """The name of the used subblock holding ``node``, else None."""
        return next((s.name for s in self.subblocks if node in s.nodes), None)


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(node: Mapping[str, Any]) -> int:
    raw = str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0"))
    return int(raw) if raw.isdigit() else 0


def read_layout(nodes: Sequence[Mapping[str, Any]], levels: Sequence[str], min_hosts: int = 4) -> Layout:
    """The demo's :class:`Layout` from Node objects (dicts, as the API returns them).

    ``levels``: the configured topology label keys, highest first (block, subblock, ...).
    Usable nodes are Ready, not cordoned, untainted, with at least one ``nvidia.com/gpu``
    and both level labels. Subblocks are taken in name order: the first two blocks that
    have two subblocks of at least ``min_hosts`` usable nodes, all four cut to the size of
    the smallest and all with the GPU count of most nodes. Raises :class:`Unsuitable`
    naming what is missing (how many blocks and subblocks were found).
    """
    if len(levels) < 2:
        raise Unsuitable(f"needs at least two topology levels (block, subblock); configured: {list(levels)}")
    block_key, sub_key = levels[0], levels[1]
    host_key = levels[2] if len(levels) > 2 else contract.HOSTNAME_LABEL
    by_sub: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    shared: list[str] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        spec = node.get("spec") or {}
        if not _ready(node) or spec.get("unschedulable") or _gpus(node) < 1:
            continue
        if labels.get(contract.DEVICE_MODE_LABEL) == contract.DEVICE_MODE_SHARED:
            shared.append(meta["name"])
            continue
        if spec.get("taints") or block_key not in labels or sub_key not in labels:
            continue
        by_sub.setdefault((labels[block_key], labels[sub_key]), []).append(
            (labels.get(host_key, meta["name"]), meta["name"], _gpus(node)))
    gpu_counts = [g for members in by_sub.values() for _, _, g in members]
    if not gpu_counts:
        raise Unsuitable(f"no Ready, untainted node with {GPU} and the labels {block_key} and {sub_key}")
    gpus = max(set(gpu_counts), key=lambda g: (gpu_counts.count(g), g))
    blocks: dict[str, list[tuple[str, list[str]]]] = {}
    for (block, sub), members in sorted(by_sub.items()):
        names = [name for _, name, g in sorted(members) if g == gpus]
        if len(names) >= min_hosts:
            blocks.setdefault(block, []).append((sub, names))
    chosen = [(b, subs[:2]) for b, subs in sorted(blocks.items()) if len(subs) >= 2][:2]
    if len(chosen) < 2:
        raise Unsuitable(
            f"needs 2 blocks ({block_key}) with 2 subblocks ({sub_key}) each of at least {min_hosts} Ready, "
            f"untainted nodes with {gpus} {GPU}; found {len(blocks)} block(s) with such subblocks: "
            + (", ".join(f"{b} ({len(s)})" for b, s in sorted(blocks.items())) or "none"))
    hosts = min(len(names) for _, subs in chosen for _, names in subs)
    subblocks = tuple(Subblock(b, sub, tuple(names[:hosts])) for b, subs in chosen for sub, names in subs)
    assert len(subblocks) == 4
    return Layout(subblocks, hosts, gpus, tuple(sorted(shared)), len(nodes), sub_key, block_key)  # type: ignore[arg-type]


def node_objects(api: Any) -> list[dict[str, Any]]:
    """The cluster's Nodes as dicts (what :func:`read_layout` reads), from an API client."""
    return [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]


#: Taints the node lifecycle controller puts on a node until it has seen it Ready.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def settled_layout(api: Any, levels: Sequence[str], timeout: float = 60.0) -> Layout:
    """:func:`read_layout` of a cluster just started: new nodes carry the
    ``node.kubernetes.io/not-ready`` taint until the node lifecycle controller has seen them
    Ready (and :func:`read_layout` would cut every subblock to the size of one still
    tainted), so read again until no node carries a taint of :data:`LIFECYCLE_TAINTS` and
    the layout is complete; raises :class:`Unsuitable` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        nodes = node_objects(api)
        tainted = sorted(n["metadata"]["name"] for n in nodes
                         if any(t.get("key") in LIFECYCLE_TAINTS for t in (n.get("spec") or {}).get("taints") or []))
        try:
            if not tainted:
                return read_layout(nodes, levels)
        except Unsuitable:
            if time.monotonic() > end:
                raise
        if tainted and time.monotonic() > end:
            raise Unsuitable(f"{len(tainted)} node(s) still tainted not-ready after {timeout:.0f}s: "
                             f"{', '.join(tainted[:5])}")
        time.sleep(POLL_SECONDS)


# --------------------------------------------------------------------------- narration
@dataclass
class Narrator:
    """Writes the story: a heading per scenario, a line per step, commands with their output."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    width: int = 110

    def heading(self, text: str) -> None:
        """A scenario's title line."""
        print(f"\n== {text}", file=self.out, flush=True)

    def step(self, text: str) -> None:
        """One step of narration, wrapped at :attr:`width` columns."""
        print(textwrap.fill(text, self.width, initial_indent="   ", subsequent_indent="     ",
                            break_on_hyphens=False, break_long_words=False), file=self.out, flush=True)

    def command(self, shown: str, output: str) -> None:
        """``$ command`` and its output, indented."""
        print(f"   $ {shown}", file=self.out)
        for line in output.rstrip("\n").splitlines():
            print(f"       {line}", file=self.out)
        self.out.flush()


# --------------------------------------------------------------------------- the stage
class Stage:
    """One cluster the scenarios run on.

    ``kubeconfig``: the admin's kubeconfig (every command and API call uses it);
    ``kubectl``: the kubectl executable; ``config``: Troupe's configuration in effect;
    ``layout``: see :class:`Layout`; ``logs``: where to look when something fails (a
    directory of logs, or the command that shows them); ``local``: the demo started this
    cluster (its Troupe, its JobSet controller).
    """

    def __init__(self, kubeconfig: Path, kubectl: str, config: Config, layout: Layout, logs: str,
                 local: bool, narrator: Narrator | None = None) -> None:
        from kubernetes import config as kube_config

        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self.config = config
        self.layout = layout
        self.logs = logs
        self.local = local
        self.narrator = narrator or Narrator()
        self.api = kube_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.scheduling = client.SchedulingV1Api(self.api)
        #: What the running scenario asserted, one line per check (the summary counts them).
        self.checks: list[str] = []
        #: Namespaces the running scenario created (the runner deletes them after it).
        self.created: list[str] = []

    # ----------------------------------------------------------------- story
    def say(self, text: str) -> None:
        """One line of narration."""
        self.narrator.step(text)

    def _env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl with the stage's kubeconfig (``$KUBECONFIG``, as a user who exported
        it) and the plugin ``kubectl-troupe`` on the PATH; output captured. Raises
        :class:`DemoFailure` with stderr on a non-zero exit when ``check``."""
        done = subprocess.run([self.kubectl_path, *args], input=input, capture_output=True, text=True,
                              timeout=timeout, env=self._env(), check=False)
        if check and done.returncode != 0:
            raise DemoFailure(f"kubectl {shlex.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
        return done

    def show(self, *args: str, input_note: str = "", input: str | None = None, check: bool = True,
             stderr: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS`` and print it with its output (stdout; with ``stderr``
        also stderr: a refusal). ``input_note`` is shown after the command for stdin."""
        done = self.kubectl(*args, input=input, check=check)
        shown = "kubectl " + shlex.join(args) + (f"  {input_note}" if input_note else "")
        self.narrator.command(shown, done.stdout + (done.stderr if stderr else ""))
        return done

    def troupe(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``kubectl troupe ARGS``, shown with its output (the installed plugin, found by
        kubectl on the PATH). Raises :class:`DemoFailure` when it fails."""
        plugin = Path(sys.executable).parent / "kubectl-troupe"
        if plugin.exists():
            return self.show("troupe", *args)
        done = subprocess.run([sys.executable, "-m", "reconciler", *args], capture_output=True, text=True,
                              timeout=60, env=self._env(), check=False)
        self.narrator.command("python -m reconciler " + shlex.join(args), done.stdout)
        if done.returncode != 0:
            raise DemoFailure(f"python -m reconciler {shlex.join(args)} failed: {done.stderr.strip()}")
        return done

    # ----------------------------------------------------------------- checks
    def expect(self, condition: object, what: str) -> None:
        """Raise :class:`DemoFailure` saying ``what`` should have held, unless ``condition``."""
        if not condition:
            raise DemoFailure(f"expected {what}")
        self.checks.append(what)

    def wait(self, what: str, probe: Callable[[], T | None], timeout: float = 60.0, record: bool = True) -> T:
        """Poll ``probe`` until it returns something truthy, and return it; raise
        :class:`DemoFailure` naming ``what``, the timeout and the last value otherwise.
        ``record``: count it among the scenario's checks."""
        end = time.monotonic() + timeout
        last: Any = None
        while True:
            last = probe()
            if last:
                if record:
                    self.checks.append(what)
                return last
            if time.monotonic() > end:
                raise DemoFailure(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")
            time.sleep(POLL_SECONDS)

    # ----------------------------------------------------------------- objects
    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """Create namespace ``name`` (labelled as the demo's, plus ``labels``), first
        removing one left over by an interrupted run; waits for its default ServiceAccount."""
        with contextlib.suppress(ApiException):
            if self.core.read_namespace(name):
                self.delete_namespace(name, wait_gone=True)
        self.core.create_namespace({"metadata": {"name": name, "labels": {DEMO_LABEL: "true", **(labels or {})}}})
        self.created.append(name)
        self.wait(f"ServiceAccount default in namespace {name}", lambda: any(
            sa.metadata.name == "default" for sa in self.core.list_namespaced_service_account(name).items),
            record=False)
        return name

    def delete_namespace(self, name: str, wait_gone: bool = False) -> None:
        """Delete a namespace and wait until its pods are gone (their capacity free again);
        with ``wait_gone``, until the namespace itself is."""
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(name, propagation_policy="Background", grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        self.wait(f"the pods of namespace {name} gone", lambda: not self.core.list_namespaced_pod(name).items,
                  timeout=120, record=False)
        if wait_gone:
            def gone() -> bool:
                try:
                    self.core.read_namespace(name)
                except ApiException as e:
                    return e.status == 404
                return False
            self.wait(f"namespace {name} deleted", gone, timeout=120, record=False)

    def gang(self, name: str, size: int, timeout: int | None = None,
             extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The gang annotations with the configured prefix (``<prefix>-name``, ``-size``,
        ``-schedule-timeout-seconds`` when ``timeout`` is given) plus ``extra`` keys."""
        prefix = self.config.gang_annotation_prefix
        keys = {f"{prefix}{contract.GANG_NAME_SUFFIX}": name, f"{prefix}{contract.GANG_SIZE_SUFFIX}": str(size)}
        if timeout is not None:
            keys[f"{prefix}{contract.GANG_TIMEOUT_SUFFIX}"] = str(timeout)
        return {**keys, **(extra or {})}

    def pods(self, namespace: str, selector: str = "") -> list[Any]:
        """The namespace's pods not being deleted, by name."""
        items = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return sorted((p for p in items if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)

    def node_labels(self) -> dict[str, dict[str, str]]:
        """Every node's labels, by node name."""
        return {n.metadata.name: dict(n.metadata.labels or {}) for n in self.core.list_node().items}

    @contextlib.contextmanager
    def priority_classes(self, classes: Mapping[str, int]) -> Iterator[None]:
        """PriorityClasses (name -> value) for the block's duration."""
        made = []
        try:
            for name, value in classes.items():
                with contextlib.suppress(ApiException):
                    self.scheduling.delete_priority_class(name)
                self.scheduling.create_priority_class({
                    "metadata": {"name": name, "labels": {DEMO_LABEL: "true"}}, "value": value,
                    "description": "Troupe demo"})
                made.append(name)
            yield
        finally:
            for name in made:
                with contextlib.suppress(ApiException):
                    self.scheduling.delete_priority_class(name)


# --------------------------------------------------------------------------- builders
def pod(name: str, *, gpus: int = 0, cpu: str = "100m", annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None, node_selector: Mapping[str, str] | None = None,
        priority_class: str | None = None) -> dict[str, Any]:
    """A pause pod (restartPolicy Never, no grace period) asking ``gpus`` whole GPUs."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["requests"][GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": dict(annotations or {}),
                         "labels": {DEMO_LABEL: "true", **(labels or {})}},
            "spec": spec}


def indexed_job(name: str, size: int, template: Mapping[str, Any], disruption_ignored: bool = True) -> dict[str, Any]:
    """An Indexed Job of ``size`` pods from a pod body (its metadata and spec), which
    ignores disruptions (Troupe's rollback, an eviction) in its pod failure policy, as
    docs/contract.md advises for gangs, so its deleted pods are recreated, not failed."""
    spec: dict[str, Any] = {
        "completionMode": "Indexed", "completions": size, "parallelism": size, "backoffLimit": 0,
        "template": {"metadata": {k: template["metadata"][k] for k in ("annotations", "labels")},
                     "spec": template["spec"]},
    }
    if disruption_ignored:
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {DEMO_LABEL: "true"}}, "spec": spec}


def gang_condition(p: Any) -> tuple[str, str, str] | None:
    """A pod's ``troupe.io/Gang`` condition as (status, reason, message), else None."""
    for c in p.status.conditions or []:
        if c.type == contract.GANG_CONDITION:
            return str(c.status), str(c.reason or ""), str(c.message or "")
    return None


def running(pods: Sequence[Any], count: int) -> list[Any] | None:
    """``pods`` when exactly ``count`` of them exist and all run, else None."""
    ok = len(pods) == count and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
    return list(pods) if ok else None


def short_id() -> str:
    """Six hex digits, for names that must not collide with a previous run's."""
    return uuid.uuid4().hex[:6]
