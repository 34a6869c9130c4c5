"""The engine's workload kind modules (reconciler/engine/model/kinds/): one per kind of the
contract's registry, asked in the order that gives a pod its gang."""

from __future__ import annotations

from reconciler.engine.model import workloads as wl
from reconciler.engine.model.kinds import MODULE_OF, REGISTRY
from reconciler.engine.model.pods import PodInfo
from troupe import contract
from troupe.workloadkinds import KINDS


def _pod(labels: dict[str, str], owner: tuple[str, str, str]) -> PodInfo:
    api_version, kind, name = owner
    return PodInfo.from_object({"metadata": {
        "name": "p", "namespace": "team", "labels": labels,
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": True}]},
        "spec": {"containers": [{"name": "c"}]}})


def test_every_kind_of_the_contract_has_one_module() -> None:
    assert sorted(m.facts.kind for m in REGISTRY) == sorted(k.kind for k in KINDS)
    assert all(MODULE_OF[k.kind].facts is k for k in KINDS)


def test_a_pod_is_its_first_kinds_member_in_the_registrys_order() -> None:
    jobset_pod = _pod({contract.JOBSET_NAME_LABEL: "js", contract.JOBSET_RESTART_LABEL: "2"},
                      ("batch/v1", "Job", "js-w-0"))
    assert wl.group(jobset_pod) == ("jobset:js:2", ("JobSet", "team", "js"))
    assert wl.group(_pod({}, ("batch/v1", "Job", "j"))) == ("job:j", ("Job", "team", "j"))
    assert wl.group(_pod({}, ("kubeflow.org/v1", "PyTorchJob", "pt"))) == ("pytorchjob:pt", ("PyTorchJob", "team", "pt"))
    lws_pod = _pod({contract.LWS_NAME_LABEL: "l", contract.LWS_GROUP_INDEX_LABEL: "1"}, ("apps/v1", "StatefulSet", "l-1"))
    assert wl.group(lws_pod) == ("lws:l:1", ("LeaderWorkerSet", "team", "l"))
    assert wl.group(_pod({}, ("example.com/v1", "Job", "j"))) is None


def test_each_kind_counts_its_members_and_the_most_pods_it_runs() -> None:
    job = {"metadata": {"name": "j"}, "spec": {"parallelism": 4, "completions": 6}, "status": {"succeeded": 3}}
    assert MODULE_OF["Job"].size(job) == (3, "Job j parallelism, 3 completed")
    assert MODULE_OF["Job"].most_pods(job) == (4, "Job j: min(spec.parallelism, spec.completions)")
    lws = {"metadata": {"name": "l"}, "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 4}}}
    assert MODULE_OF["LeaderWorkerSet"].size(lws) == (4, "LeaderWorkerSet l group size")
    assert MODULE_OF["LeaderWorkerSet"].most_pods(lws)[0] == 12
    assert list(MODULE_OF["LeaderWorkerSet"].slots(lws, "l", "team", "", "u")) == []
