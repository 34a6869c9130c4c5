"""The ``provisioning`` configuration key: off by default, every field validated, errors that name the field."""

import pytest

from troupe.config import Config, ConfigError, from_mapping
from troupe.provisioning import ATOMIC_SCALE_UP, QUEUED_PROVISIONING, Expression, Provisioning


def test_off_by_default_and_when_empty():
    assert Config().provisioning is None
    assert from_mapping({"provisioning": {}}).provisioning is None
    assert from_mapping({"provisioning": None}).provisioning is None


def test_every_field_is_read():
    got = from_mapping({"provisioning": {
        "className": QUEUED_PROVISIONING, "parameters": {"maxRunDurationSeconds": "3600"},
        "namespaceSelector": {"matchLabels": {"team": "ml"},
                              "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]},
        "preferPreemption": False}}).provisioning
    assert got == Provisioning(QUEUED_PROVISIONING, (("maxRunDurationSeconds", "3600"),), (("team", "ml"),),
                               (Expression("tier", "In", ("gpu",)),), False)
    assert got.selects({"team": "ml", "tier": "gpu"})
    assert not got.selects({"team": "ml", "tier": "cpu"})
    assert not got.selects({})


def test_defaults_of_its_fields():
    got = from_mapping({"provisioning": {"preferPreemption": True}}).provisioning
    assert got is not None
    assert (got.class_name, got.parameters, got.prefer_preemption) == (ATOMIC_SCALE_UP, (), True)
    assert hash(from_mapping({"provisioning": {"parameters": {"a": "b"}}}))  # the configuration stays hashable
    assert got.selects({}) and got.selects({"any": "thing"})


@pytest.mark.parametrize(("raw", "message"), [
    ("on", "provisioning: must be a mapping of className, namespaceSelector, parameters, preferPreemption, got 'on'"),
    ({"class": "x"}, "provisioning.class: unknown field"),
    ({"className": "Best_Effort"}, "provisioning.className: must be a provisioning class name"),
    ({"className": 7}, "provisioning.className: must be a provisioning class name (a DNS subdomain such as "
                       "best-effort-atomic-scale-up.autoscaling.x-k8s.io), got 7"),
    ({"parameters": {"maxRunDurationSeconds": 3600}}, "provisioning.parameters: must be a mapping of strings to "
                                                      "strings, got {'maxRunDurationSeconds': 3600}"),
    ({"parameters": {"ValidUntilSeconds": "9" * 256}}, "provisioning.parameters: at most 100, each at most 255 "
                                                        "characters (the ProvisioningRequest CRD), got 1, "
                                                        "'ValidUntilSeconds' of 256"),
    ({"preferPreemption": "yes"}, "provisioning.preferPreemption: must be true or false, got 'yes'"),
    ({"namespaceSelector": {"labels": {}}}, "provisioning.namespaceSelector: must be a label selector"),
    ({"namespaceSelector": {"matchLabels": ["a"]}}, "provisioning.namespaceSelector.matchLabels: must be a mapping"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}},
     "provisioning.namespaceSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist, "
     "got 'Has'"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
     "provisioning.namespaceSelector.matchExpressions[0].values: In needs some values"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
     "provisioning.namespaceSelector.matchExpressions[0].values: Exists needs no values"),
])
def test_a_bad_value_is_refused_naming_the_field_and_value(raw, message):
    with pytest.raises(ConfigError) as e:
        from_mapping({"provisioning": raw})
    assert message in str(e.value)


@pytest.mark.parametrize(("expression", "labels", "want"), [
    (Expression("a", "Exists"), {"a": ""}, True), (Expression("a", "Exists"), {}, False),
    (Expression("a", "DoesNotExist"), {}, True), (Expression("a", "NotIn", ("x",)), {"a": "y"}, True),
    (Expression("a", "NotIn", ("x",)), {"a": "x"}, False), (Expression("a", "NotIn", ("x",)), {}, True),
])
def test_selector_expressions_read_as_kubernetes_reads_them(expression, labels, want):
    assert expression.matches(labels) is want
