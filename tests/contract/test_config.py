"""The configuration file: defaults, every key validated, errors that name the key."""

import pytest

from troupe.config import Config, ConfigError, from_mapping, load_config


def test_no_file_means_the_documented_defaults():
    config = load_config(None)
    assert config.gang_annotation_prefix == "troupe.io/gang"
    assert (config.gang_schedule_timeout_seconds_limit, config.gang_schedule_default_timeout_seconds,
            config.gang_schedule_timeout_jitter_seconds) == (100, 30, 30)
    assert config.topology_levels[0] == "cloud.google.com/gce-topology-block"
    assert config.topology_fallback_levels == ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host")
    assert config.gang_preemption_mode == "off"
    assert config.shared_device_resources == ("nvidia.com/gpu",)


def test_an_empty_file_means_defaults(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("")
    assert load_config(str(f)) == Config()


def test_the_pfn_prefix_works_by_configuration(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text('gangAnnotationPrefix: gang-scheduling.preferred.jp/gang\ngangPreemptionMode: "atomic"\n')
    config = load_config(str(f))
    assert config.gang_annotation_prefix == "gang-scheduling.preferred.jp/gang"
    assert config.gang_preemption_mode == "atomic"


@pytest.mark.parametrize(
    ("data", "want_in_message"),
    [
        ({"gangScheduleTimeoutSecondsLimit": "100"}, "gangScheduleTimeoutSecondsLimit: must be an integer >= 1, got '100'"),
        ({"gangScheduleTimeoutSecondsLimit": 0}, "gangScheduleTimeoutSecondsLimit: must be an integer >= 1, got 0"),
        ({"gangScheduleTimeoutJitterSeconds": -1}, "gangScheduleTimeoutJitterSeconds: must be an integer >= 0"),
        ({"gangScheduleTimeoutJitterSeconds": True}, "gangScheduleTimeoutJitterSeconds"),
        ({"gangPreemptionMode": False}, 'quote it: "off"'),
        ({"gangPreemptionMode": "sometimes"}, "gangPreemptionMode: must be one of off, minimal, atomic, got 'sometimes'"),
        ({"gangAnnotationPrefix": "Not A Prefix"}, "gangAnnotationPrefix"),
        ({"topologyLevels": []}, "topologyLevels"),
        ({"topologyLevels": ["a", "a"]}, "topologyLevels: must not repeat"),
        ({"topologyFallbackLevels": ["x"]}, "topologyFallbackLevels: must have as many levels"),
        ({"excludedNamespaces": ["Kube_System"]}, "excludedNamespaces[0]"),
        ({"gangScheduleDefaultTimeoutSeconds": 200}, "exceeds gangScheduleTimeoutSecondsLimit"),
        ({"gangTimeout": 3}, "gangTimeout: unknown configuration key"),
        ({"topologySpreadDefaultConstraints": {"topologyKey": "z"}}, "topologySpreadDefaultConstraints: must be a list"),
        ({"topologySpreadDefaultConstraints": [{"topologyKey": "zone", "maxSkew": 0}]},
         "topologySpreadDefaultConstraints[0].maxSkew: must be an integer >= 1, got 0"),
        ({"topologySpreadDefaultConstraints": [{"topologyKey": "zone", "maxSkew": 1, "labelSelector": {}}]},
         "topologySpreadDefaultConstraints[0]: must be a mapping of"),
        ({"topologySpreadDefaultConstraints": [{"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "Never"}]},
         "topologySpreadDefaultConstraints[0].whenUnsatisfiable: must be one of DoNotSchedule, ScheduleAnyway"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(data, want_in_message):
    with pytest.raises(ConfigError) as err:
        from_mapping(data)
    assert want_in_message in str(err.value)


def test_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        load_config(str(missing))
    bad = tmp_path / "bad.yaml"
    bad.write_text("gangAnnotationPrefix: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(str(bad))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("gangScheduleTimeoutSecondsLimit: -5\n")
    with pytest.raises(ConfigError, match=r"wrong\.yaml: gangScheduleTimeoutSecondsLimit"):
        load_config(str(wrong))


def test_default_spread_constraints_are_read_as_kube_scheduler_writes_them():
    config = from_mapping({"topologySpreadDefaultConstraints": [
        {"topologyKey": "topology.kubernetes.io/zone", "maxSkew": 2, "minDomains": 3, "nodeTaintsPolicy": "Honor"}]})
    (only,) = config.topology_spread_default_constraints
    assert (only.topology_key, only.max_skew, only.when_unsatisfiable, only.min_domains, only.node_affinity_policy,
            only.node_taints_policy) == ("topology.kubernetes.io/zone", 2, "DoNotSchedule", 3, "Honor", "Honor")
    assert Config().topology_spread_default_constraints == ()


def test_level_depth_maps_both_label_sets_to_the_same_depth():
    config = Config()
    assert config.level_depth("cloud.google.com/gce-topology-subblock") == 1
    assert config.level_depth("topology.gke.io/rack") == 1
    assert config.level_depth("example.com/zone") is None
