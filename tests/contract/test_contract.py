"""Parsing a pod into its gang, topology request, device group and rank."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from troupe import contract, ranks
from troupe.config import Config
from troupe.errors import ContractError

CONFIG = Config()


def pod(annotations=None, labels=None, name="worker-0", namespace="team-a", gates=()):
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {}),
                     "labels": dict(labels or {})},
        "spec": {"schedulingGates": [{"name": g} for g in gates], "containers": [{"name": "c"}]},
    }


def gang(size="4", name="train", timeout=None):
    a = {"troupe.io/gang-name": name, "troupe.io/gang-size": size}
    if timeout is not None:
        a["troupe.io/gang-schedule-timeout-seconds"] = timeout
    return a


def test_a_pod_without_gang_keys_has_no_gang():
    assert contract.parse_gang(pod({"unrelated": "x"}), CONFIG) is None


def test_a_gang_is_namespace_and_name_with_the_default_timeout():
    spec = contract.parse_gang(pod(gang()), CONFIG)
    assert spec == contract.GangSpec("team-a", "train", 4, 30)
    assert spec.key == "team-a/train"


@pytest.mark.parametrize(("raw", "want"), [("5", 5), ("100", 100), ("101", 100), ("99999", 100)])
def test_the_timeout_is_capped_by_the_limit(raw, want):
    assert contract.parse_gang(pod(gang(timeout=raw)), CONFIG).timeout_seconds == want


@pytest.mark.parametrize(
    ("annotations", "want_message"),
    [
        (gang(size="abc"), "annotation troupe.io/gang-size: must be an integer >= 1, got 'abc'"),
        (gang(size="0"), "troupe.io/gang-size: must be an integer >= 1, got '0'"),
        (gang(size="-2"), "troupe.io/gang-size: must be an integer >= 1, got '-2'"),
        (gang(size="2.5"), "troupe.io/gang-size: must be an integer >= 1, got '2.5'"),
        (gang(size=" 3"), "troupe.io/gang-size: must be an integer >= 1, got ' 3'"),
        (gang(timeout="0"), "troupe.io/gang-schedule-timeout-seconds: must be a positive integer number of seconds, got '0'"),
        (gang(timeout="10s"), "troupe.io/gang-schedule-timeout-seconds: must be a positive integer number of seconds, got '10s'"),
        (gang(name="-bad"), "troupe.io/gang-name: must be a valid label value"),
        (gang(name="x" * 64), "troupe.io/gang-name: must be a valid label value"),
        (gang(name="has space"), "troupe.io/gang-name: must be a valid label value"),
        ({"troupe.io/gang-size": "3"}, "troupe.io/gang-name: is required with the other gang annotations, it is missing"),
        ({"troupe.io/gang-name": "g"}, "troupe.io/gang-size: is required with the other gang annotations, it is missing"),
    ],
)
def test_bad_gang_annotations_are_refused_naming_key_and_value(annotations, want_message):
    with pytest.raises(ContractError) as err:
        contract.parse_gang(pod(annotations), CONFIG)
    assert want_message in str(err.value)


def test_the_pfn_prefix_reads_the_pfn_keys():
    config = Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang")
    p = pod({"gang-scheduling.preferred.jp/gang-name": "awesome_pfn", "gang-scheduling.preferred.jp/gang-size": "2",
             "gang-scheduling.preferred.jp/gang-schedule-timeout-seconds": "100"})
    assert contract.parse_gang(p, config) == contract.GangSpec("team-a", "awesome_pfn", 2, 100)
    assert contract.parse_gang(pod(gang()), config) is None


def test_a_topology_request_must_name_a_configured_level():
    ok = pod({contract.TOPOLOGY_REQUIRED_LEVEL: "cloud.google.com/gce-topology-subblock"})
    assert contract.parse_topology_request(ok, CONFIG).required_level == "cloud.google.com/gce-topology-subblock"
    older = pod({contract.TOPOLOGY_PREFERRED_LEVEL: "topology.gke.io/rack"})
    assert contract.parse_topology_request(older, CONFIG).preferred_level == "topology.gke.io/rack"
    with pytest.raises(ContractError, match=r"must name a configured level .*gce-topology-block"):
        contract.parse_topology_request(pod({contract.TOPOLOGY_REQUIRED_LEVEL: "zone"}), CONFIG)
    both = pod({contract.TOPOLOGY_REQUIRED_LEVEL: "topology.gke.io/rack", contract.TOPOLOGY_PREFERRED_LEVEL: "topology.gke.io/rack"})
    with pytest.raises(ContractError, match="cannot be set together"):
        contract.parse_topology_request(both, CONFIG)


@pytest.mark.parametrize(
    ("resource", "want"),
    [
        ("nvidia.com/gpu", "NVIDIA_VISIBLE_DEVICES"),
        ("nvidia.com/mig-1g.5gb", "NVIDIA_VISIBLE_DEVICES"),
        ("amd.com/gpu", "AMD_VISIBLE_DEVICES"),
        ("huawei.com/Ascend910", "ASCEND_VISIBLE_DEVICES"),
        ("vendor.com/device", "VENDOR_DEVICE_VISIBLE_DEVICES"),
        ("habana.ai/gaudi", "HABANA_GAUDI_VISIBLE_DEVICES"),
        ("tpu", "TPU_VISIBLE_DEVICES"),
        ("a/b/c", "A_B_C_VISIBLE_DEVICES"),
    ],
)
def test_device_env_var_names_follow_the_seed_rule(resource, want):
    assert contract.device_env_var(resource) == want


@pytest.mark.parametrize(
    ("key", "want"),
    [
        ("deviceshare.io/selected-devices", True),
        ("deviceshare.io/env.NVIDIA_VISIBLE_DEVICES", True),
        ("reconciler.troupe.io/node", True),
        ("reconciler.troupe.io/anything", True),
        ("deviceshare.io/group", False),
        ("troupe.io/gang-name", False),
    ],
)
def test_reserved_annotations_are_the_reconcilers_decisions(key, want):
    assert contract.is_reserved_annotation(key) is want


def test_ranks_order_by_index_then_replica_then_name_suffix():
    pods = [
        pod(name="w-10"), pod(name="w-2"), pod(name="zeta"),
        pod(name="a", labels={contract.KUBEFLOW_REPLICA_INDEX: "0"}),
        pod(name="b", labels={contract.JOB_COMPLETION_INDEX: "10"}),
        pod(name="c", labels={contract.JOB_COMPLETION_INDEX: "9"}),
    ]
    assert [p["metadata"]["name"] for p in sorted(pods, key=ranks.rank_key)] == ["c", "b", "a", "w-2", "w-10", "zeta"]


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30, unique=True))
def test_completion_indexes_sort_numerically_whatever_the_names(indexes):
    pods = [pod(name=f"p{i}-x", labels={contract.JOB_COMPLETION_INDEX: str(i)}) for i in indexes]
    ranked = sorted(pods, key=ranks.rank_key)
    assert [int(p["metadata"]["labels"][contract.JOB_COMPLETION_INDEX]) for p in ranked] == sorted(indexes)


def test_auto_gangs_group_as_the_gke_daemon_does():
    assert contract.auto_gang_key(pod(labels={"job-name": "j", "name": "n"})) == "job-name=j"
    assert contract.auto_gang_key(pod(labels={contract.KUBEFLOW_JOB_NAME_LABEL: "k"})) == "training.kubeflow.org/job-name=k"
    owned = pod(labels={"name": "n"})
    owned["metadata"]["ownerReferences"] = [{"uid": "u-1", "kind": "StatefulSet", "name": "s"}]
    assert contract.auto_gang_key(owned) == "owner=u-1"
    assert contract.auto_gang_key(pod(labels={"name": "n"})) == "name=n"
    assert contract.auto_gang_key(pod()) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12))
def test_malformed_pods_never_crash_the_readers(junk):
    obj = {"metadata": junk, "spec": junk} if not isinstance(junk, dict) else junk
    contract.pod_gates(obj)
    ranks.rank_key(obj)
    contract.auto_gang_key(obj)
    try:
        contract.parse_gang(obj, CONFIG)
    except ContractError as e:
        assert e.key.startswith("troupe.io/gang")


@pytest.mark.parametrize("size", ["5" * 5000, "4\n", "\u0664", "1" * 10])
def test_a_size_that_is_huge_non_ascii_or_ends_in_a_newline_is_refused_by_name_never_with_a_crash(size):
    pod = {"metadata": {"namespace": "ml", "annotations": {"troupe.io/gang-name": "g", "troupe.io/gang-size": size}}}
    with pytest.raises(ContractError) as e:
        contract.parse_gang(pod, Config())
    assert str(e.value).startswith("annotation troupe.io/gang-size: must be an integer >= 1")
    assert len(str(e.value)) < 200, "a long value is quoted cut, with its length"


def test_a_gang_name_with_a_trailing_newline_is_refused():
    pod = {"metadata": {"annotations": {"troupe.io/gang-name": "g\n", "troupe.io/gang-size": "2"}}}
    with pytest.raises(ContractError, match="must be a valid label value"):
        contract.parse_gang(pod, Config())


def test_a_rank_index_of_5000_digits_ranks_by_name_and_never_raises():
    pod = {"metadata": {"name": "w-3", "labels": {contract.JOB_COMPLETION_INDEX: "9" * 5000}}}
    assert ranks.rank_key(pod) == (4, 0, 0, "w-", 3, "w-3")
