"""The reconciler's controllers on an in-memory cache and writer ports, for the controller
tests: :class:`Harness` (a cache and a FakeCluster over the same objects, the watch simulated
by :meth:`Harness.sync`) and the small cluster most of those tests use."""

from __future__ import annotations

import json

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.controller import GangController
from reconciler.engine.model.keys import PodKey
from reconciler.ports import UNFENCED
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import Controllers, compose
from testbed.as_created import RESERVATION_KEY
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

CONFIG = Config()
NO_JITTER = Config(gang_schedule_timeout_jitter_seconds=0)


class Harness:
    """A cache and a FakeCluster holding the same objects, and the controllers over them; the
    watch is simulated by :meth:`sync` (the fakes' objects fed back into the cache). Every
    write passes ``fence``."""

    def __init__(self, nodes, pods, config=CONFIG, groups=(), jobs=(), fence=UNFENCED):
        self.config = config
        self.cluster = FakeCluster(fence)
        self.cache = ClusterCache(config, reservation_key=RESERVATION_KEY)
        self.cache.replace_nodes([self.cluster.nodes.add(n) for n in nodes])
        self.cache.replace_groups([self.cluster.groups.add(g) for g in groups])
        self.cache.replace_pods([self.cluster.pods.add(p) for p in pods])
        self.cache.replace_jobs([self.cluster.workloads.add("Job", j) for j in jobs])
        self.wall = 1_800_000_000.0
        self.controllers = self.new_controllers()

    def new_controllers(self) -> Controllers:
        """The controllers as a restarted reconciler has them: nothing remembered."""
        return compose(self.cache, self.cluster, self.config, wall_clock=lambda: self.wall)

    @property
    def controller(self) -> GangController:
        """The gang controller."""
        return self.controllers.gangs

    def reconcile(self, key="team-a/train"):
        return self.controller.reconcile(key)

    def pod(self, name, namespace="team-a"):
        return self.cluster.pods.objects[PodKey(namespace, name)]

    def add(self, pod):
        self.cache.pod_event("ADDED", self.cluster.pods.add(pod))

    def sync(self):
        """Deliver the fakes' objects to the cache, as the watch would."""
        for name in {name for name, _ in self.cluster.nodes.patches}:  # nodes the reconciler wrote
            self.cache.node_event("MODIFIED", self.cluster.nodes.objects[name])
        for (kind, _, _), obj in self.cluster.workloads.objects.items():
            if kind == "Job":
                self.cache.job_event("MODIFIED", obj)
        refs = set(self.cluster.pods.objects)
        for pod in self.cluster.pods.objects.values():
            self.cache.pod_event("MODIFIED", pod)
        for ref in self.cache.pod_refs():
            if ref not in refs:
                self.cache.pod_event("DELETED", {"metadata": {"namespace": ref.namespace, "name": ref.name}})

    def bind(self, name, namespace="team-a"):
        """What kube-scheduler does to a released pod: set spec.nodeName to its pin."""
        ref = PodKey(namespace, name)
        pod = self.cluster.pods.objects[ref]
        pod["spec"]["nodeName"] = pod["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]
        pod["status"]["phase"] = "Running"
        pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        self.cache.pod_event("MODIFIED", self.cluster.pods.read(ref))

    def gated(self, *names):
        return [n for n in names if self.pod(n)["spec"].get("schedulingGates")]

    def node_of(self, name, namespace="team-a"):
        return self.pod(name, namespace)["spec"].get("nodeSelector", {}).get(contract.HOSTNAME_LABEL)


#   block b1 / subblock s1: n1 n2      block b1 / subblock s2: n3 n4
#   each node: 4 GPUs
def four_nodes():
    return [make_node(f"n{i}").topology("b1", "s1" if i <= 2 else "s2", f"h{i}").gpus(4).build() for i in range(1, 5)]


def gang_pods(n, size=None, gpus=2, name="train", owned=False):
    pods = [make_pod(f"{name}-{i}").gang(name, size or n).index(i).gpus(gpus).gated().build() for i in range(n)]
    return own(pods, name) if owned else pods


def own(pods, job="train"):
    for p in pods:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                             "uid": f"uid-job-{job}", "controller": True}]
    return pods


def written_in(h: Harness, namespace: str) -> str:
    """Everything the controllers wrote in ``namespace`` so far, as one text: pod patches,
    pod conditions, Events about its objects, and its Gang objects (after a flush)."""
    h.controllers.conditions.flush(everything=True)
    h.controllers.gang_objects.flush(everything=True)
    pods = h.cluster.pods
    out = [json.dumps(patch) for ref, patch in pods.patches if ref.namespace == namespace]
    out += [json.dumps(condition) for ref, condition in pods.conditions if ref.namespace == namespace]
    out += [f"{e.reason}: {e.message}" for e in h.cluster.events if e.regarding.namespace == namespace]
    out += [json.dumps(obj) for (ns, _), obj in h.cluster.gang_objects.objects.items() if ns == namespace]
    return "\n".join(out)
