"""A pod's request is summed as kube-scheduler sums it; a node offers its allocatable."""

import pytest

from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.resources import node_allocatable, pod_requests, resource_order
from testbed.engine_builders import make_pod


def cpu_of(builder):
    return pod_requests(builder.build()["spec"])["cpu"]


REQUEST_CASES = [
    ("regular containers are summed",
     make_pod("p").requests(cpu="500m").container("b", {"cpu": "1500m"}), 2000),
    ("a larger init container sets the request",
     make_pod("p").requests(cpu="1").init_container("init", {"cpu": "3"}), 3000),
    ("a smaller init container changes nothing",
     make_pod("p").requests(cpu="1").init_container("init", {"cpu": "500m"}), 1000),
    ("a sidecar adds to the containers",
     make_pod("p").requests(cpu="1").init_container("proxy", {"cpu": "500m"}, sidecar=True), 1500),
    ("an init container after a sidecar runs beside it",
     make_pod("p").requests(cpu="1").init_container("proxy", {"cpu": "500m"}, sidecar=True)
     .init_container("migrate", {"cpu": "2"}), 2500),
    ("an init container before a sidecar runs alone",
     make_pod("p").requests(cpu="1").init_container("migrate", {"cpu": "2"})
     .init_container("proxy", {"cpu": "500m"}, sidecar=True), 2000),
    ("overhead is added on top",
     make_pod("p").requests(cpu="1").overhead(cpu="250m"), 1250),
    ("limits stand in for requests that are not stated",
     make_pod("p").container("b", limits={"cpu": "2"}), 2000),
    ("stated requests win over limits",
     make_pod("p").container("b", requests={"cpu": "1"}, limits={"cpu": "2"}), 1000),
    ("sums are exact before rounding up",
     make_pod("p").requests(cpu="500u").container("b", {"cpu": "500u"}), 1),
]


@pytest.mark.parametrize(("case", "pod", "want_millicores"), REQUEST_CASES, ids=[c[0] for c in REQUEST_CASES])
def test_a_pods_cpu_request_follows_kube_scheduler(case, pod, want_millicores):
    assert cpu_of(pod) == want_millicores


def test_pod_level_requests_replace_the_container_sum_for_cpu_and_memory_only():
    pod = make_pod("p").requests(cpu="1", memory="1Gi", gpu=2).build()
    pod["spec"]["resources"] = {"requests": {"cpu": "4", "nvidia.com/gpu": "7"}}
    assert pod_requests(pod["spec"]) == {"cpu": 4000, "memory": 1024**3, "nvidia.com/gpu": 2, "pods": 1}


def test_every_pod_asks_for_one_pod_slot_and_zero_amounts_are_dropped():
    assert pod_requests(make_pod("p").requests(cpu="0").build()["spec"]) == {"pods": 1}


def test_a_bad_quantity_names_the_container_and_resource():
    pod = make_pod("p").container("b", {"cpu": "lots"}).build()
    with pytest.raises(ObjectError) as err:
        pod_requests(pod["spec"])
    assert str(err.value) == "spec.containers[1].resources.requests.cpu: invalid quantity 'lots'"


def test_a_pod_without_containers_is_refused():
    with pytest.raises(ObjectError, match=r"^spec.containers: missing field$"):
        pod_requests({})


def test_a_node_offers_its_allocatable_in_units_with_kubelets_default_pod_count():
    status = {"allocatable": {"cpu": "7910m", "memory": "31Gi", "nvidia.com/gpu": "8"}}
    assert node_allocatable(status) == {"cpu": 7910, "memory": 31 * 1024**3, "nvidia.com/gpu": 8, "pods": 110}


def test_a_node_without_allocatable_is_refused():
    with pytest.raises(ObjectError, match=r"^status.allocatable: missing field$"):
        node_allocatable({"capacity": {"cpu": "8"}})


def test_resources_are_listed_in_kube_schedulers_order():
    names = ["nvidia.com/gpu", "pods", "memory", "example.com/foo", "cpu", "ephemeral-storage"]
    assert sorted(names, key=resource_order) == [
        "cpu", "memory", "ephemeral-storage", "pods", "example.com/foo", "nvidia.com/gpu",
    ]
