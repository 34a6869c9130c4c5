"""The filter profile: kube-scheduler's default profile order, every plugin module
registered once, and reasons listed by plugin then by each plugin's own order."""

from __future__ import annotations

import importlib
import pkgutil
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

import reconciler.engine.filters as filters_package
from reconciler.engine.filters import noderesources, profile, tainttoleration, volumebinding
from reconciler.engine.filters.status import Registered, Status
from reconciler.engine.model.selectors import Taint
from reconciler.engine.model.volumes import VolumeCatalog

#: The filter plugins of kube-scheduler's default profile (``getDefaultPlugins`` in
#: ``pkg/scheduler/apis/config/v1/default_plugins.go``, ``MultiPoint``, without the plugins
#: that do not filter: SchedulingGates, PrioritySort, DefaultPreemption, the scorers and the
#: binder), DynamicResources inserted before DefaultPreemption as DRA is on by default; as of
#: Kubernetes 1.37, which runs NodeName before NodeUnschedulable.
KUBE_SCHEDULER_FILTERS = (
    "NodeName", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
    "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread",
    "InterPodAffinity", "DynamicResources",
)


def plugin_modules() -> dict[str, Registered]:
    """Every module of the filters package that registers a plugin, by module name."""
    found = {}
    for info in pkgutil.iter_modules(filters_package.__path__):
        module = importlib.import_module(f"{filters_package.__name__}.{info.name}")
        registered = getattr(module, "REGISTERED", None)
        if isinstance(registered, Registered):
            found[info.name] = registered
    return found


def test_the_profile_is_kube_schedulers_default_profile_in_its_order():
    assert tuple(r.plugin for r in profile.PROFILE) == KUBE_SCHEDULER_FILTERS


def test_every_plugin_module_is_registered_once_and_named_after_its_plugins_package():
    """A new plugin is its module (named as kube-scheduler's package) and its line in the
    profile: a module that registers a plugin the profile does not list fails here."""
    modules = plugin_modules()
    for name, registered in modules.items():
        assert registered in profile.PROFILE, f"{name} defines REGISTERED but the profile does not list it"
        assert registered.source == f"pkg/scheduler/framework/plugins/{name}"
    assert sorted(modules.values(), key=profile.PROFILE.index) == list(profile.PROFILE)
    assert len({r.plugin for r in profile.PROFILE}) == len(profile.PROFILE)


def test_the_node_checks_run_in_profile_order():
    node_plugins = [r.plugin for r in profile.PROFILE if r.node is not None]
    assert node_plugins == ["NodeUnschedulable", "TaintToleration", "NodeAffinity"]


def test_every_plugin_gives_a_status_of_its_own_name():
    assert {s.plugin for s in STATUSES} == {r.plugin for r in profile.PROFILE} - {"DynamicResources"}


def test_each_plugins_fixed_reasons_rank_in_the_order_it_lists_them():
    keys = [profile.rank(r.plugin, reason) for r in profile.PROFILE for reason in r.reasons]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


#: Every status the plugins give: their constants, and a few of each kind that carries a value.
STATUSES: list[Status] = [
    *(value for name in plugin_modules()
      for value in vars(importlib.import_module(f"{filters_package.__name__}.{name}")).values()
      if isinstance(value, Status)),
    tainttoleration.untolerated(Taint("dedicated", "infer", "NoSchedule")),
    tainttoleration.untolerated(Taint("gpu", "", "NoExecute")),
    *(s for requests in ({"cpu": 2}, {"pods": 1}, {"nvidia.com/gpu": 9}, {"cpu": 2, "example.com/fpga": 1},
                         {"devices/gpu.example.com": 1}, {"memory": 1, "nvidia.com/gpu": 9})
      if (s := noderesources.check({}, requests)) is not None),
    *(s for s in (volumebinding.prefilter(VolumeCatalog(), "ns", [claim]) for claim in ("a", "b")) if s is not None),
]
_PLUGIN_OF = {reason: s.plugin for s in STATUSES for reason in s.reasons}


@given(st.dictionaries(st.sampled_from(STATUSES), st.integers(1, 50)))
def test_listed_reasons_are_in_profile_order_then_each_plugins_order(counts: dict[Status, int]):
    listed = profile.listed(counts)
    plugins = [profile.position(_PLUGIN_OF[reason]) for reason, _ in listed]
    assert plugins == sorted(plugins)
    keys = [profile.rank(_PLUGIN_OF[reason], reason) for reason, _ in listed]
    assert keys == sorted(keys)
    want: Counter[str] = Counter()
    for status, n in counts.items():
        for reason in status.reasons:
            want[reason] += n
    assert dict(listed) == dict(want) and len(listed) == len(want)


@given(st.lists(st.sampled_from(STATUSES), min_size=1))
def test_resources_list_as_kube_scheduler_lists_them_and_a_taint_by_its_text(statuses: list[Status]):
    listed = [reason for reason, _ in profile.listed(Counter(statuses))]
    resources = [r for r in listed if _PLUGIN_OF[r] == noderesources.PLUGIN]
    assert resources == sorted(resources, key=lambda r: noderesources.REGISTERED.rank(r))
    taints = [r for r in listed if _PLUGIN_OF[r] == tainttoleration.PLUGIN]
    assert taints == sorted(taints)


def test_a_message_lists_reasons_with_their_counts():
    counts = {noderesources.check({}, {"nvidia.com/gpu": 8}): 8,
              tainttoleration.untolerated(Taint("dedicated", "infer", "NoSchedule")): 4}
    assert profile.render(counts) == "untolerated taint dedicated=infer: 4, insufficient nvidia.com/gpu: 8"
