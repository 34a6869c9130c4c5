"""The flags a :class:`Cluster` adds to its components' own, without starting anything:
by default none to kube-controller-manager and kube-scheduler (their default client rates),
and with a :class:`ClientRate` the same raised ``--kube-api-qps``/``--kube-api-burst`` to both."""

from __future__ import annotations

from devtools.devcluster import ClientRate, Cluster
from devtools.devcluster.cluster import (
    COMPONENTS,
    TOPOLOGY_AWARE_WORKLOADS,
    WORKLOAD_API,
    WORKLOAD_GATES,
)


def test_by_default_no_component_gets_a_flag_of_the_cluster(tmp_path):
    cluster = Cluster(tmp_path)

    assert {component: cluster.extra_args(component) for component in COMPONENTS} == {
        component: [] for component in COMPONENTS}


def test_a_client_rate_raises_both_controller_manager_and_scheduler_and_nothing_else(tmp_path):
    cluster = Cluster(tmp_path, client_rate=ClientRate(500, 1000), apiserver_args=["--audit-log-path=a.log"])

    assert cluster.extra_args("kube-controller-manager") == ["--kube-api-qps=500", "--kube-api-burst=1000"]
    assert cluster.extra_args("kube-scheduler") == ["--kube-api-qps=500", "--kube-api-burst=1000"]
    assert cluster.extra_args("kube-apiserver") == ["--audit-log-path=a.log"]
    assert cluster.extra_args("etcd") == cluster.extra_args("kwok") == []


def test_a_fractional_rate_is_written_as_the_flag_parses_it():
    assert ClientRate(12.5, 25).flags() == ["--kube-api-qps=12.5", "--kube-api-burst=25"]


def test_the_workload_api_is_served_and_gated_on_the_three_components_that_read_it(tmp_path):
    """The upstream Workload API (docs/decisions/056-pod-groups.md): kube-apiserver serves
    ``scheduling.k8s.io/v1beta1``; the gates go to kube-apiserver, kube-controller-manager
    and kube-scheduler, nothing to etcd or kwok."""
    cluster = Cluster(tmp_path, feature_gates=TOPOLOGY_AWARE_WORKLOADS, runtime_config=WORKLOAD_API,
                      apiserver_args=["--audit-log-path=a.log"])
    gates = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
    assert cluster.extra_args("kube-apiserver") == [gates, "--runtime-config=scheduling.k8s.io/v1beta1=true",
                                                    "--audit-log-path=a.log"]
    assert cluster.extra_args("kube-controller-manager") == cluster.extra_args("kube-scheduler") == [gates]
    assert cluster.extra_args("etcd") == cluster.extra_args("kwok") == []
    off = Cluster(tmp_path, feature_gates={**WORKLOAD_GATES, "TopologyAwareWorkloadScheduling": False})
    assert off.extra_args("kube-scheduler") == [
        "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=false"]
