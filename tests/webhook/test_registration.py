"""The MutatingWebhookConfiguration builder: fixed settings, url vs service, and
matchConditions that send exactly Troupe's pods (evaluated with cel-python, a CEL
implementation, on requests shaped as kube-apiserver builds them): an UPDATE only when it
changes a reserved annotation, a Troupe key or lifts Troupe's gate, and never one that the
webhook would have allowed untouched anyway (a property test)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.webhook_builders import ALICE, RECONCILER, make_pod, make_review
from troupe.config import Config
from webhook.admission import mutate
from webhook.registration import cel_string, match_conditions, webhook_configuration

celpy = pytest.importorskip("celpy", reason="cel-python evaluates the matchConditions")

PFN = Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang")


def the_webhook(obj: dict[str, Any]) -> dict[str, Any]:
    assert obj["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert obj["kind"] == "MutatingWebhookConfiguration"
    webhook, auto = obj["webhooks"]  # the second is the namespace opt-in (test_workload_opt_in.py)
    assert auto["name"] == "auto.pods.troupe.io"
    return webhook


def test_a_local_cluster_gets_a_url_client_config_with_the_ca_bundle() -> None:
    obj = webhook_configuration(Config(), url="https://127.0.0.1:8443/mutate", ca_bundle_pem=b"PEM")
    client = the_webhook(obj)["clientConfig"]
    assert client == {"url": "https://127.0.0.1:8443/mutate", "caBundle": base64.b64encode(b"PEM").decode()}


def test_in_cluster_gets_a_service_client_config_with_the_mutate_path() -> None:
    obj = webhook_configuration(Config(), service={"namespace": "troupe-system", "name": "troupe-webhook",
                                                   "port": 443}, name="troupe-prod")
    assert obj["metadata"]["name"] == "troupe-prod"
    assert the_webhook(obj)["clientConfig"] == {"service": {
        "namespace": "troupe-system", "name": "troupe-webhook", "path": "/mutate", "port": 443}}


def test_the_fixed_settings_are_those_of_a_safe_mutating_webhook() -> None:
    webhook = the_webhook(webhook_configuration(Config(), url="https://h/mutate"))
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                 "resources": ["pods", "pods/status"], "scope": "Namespaced"}]
    assert webhook["sideEffects"] == "None"
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["timeoutSeconds"] <= 10
    assert webhook["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}
    assert "caBundle" not in webhook["clientConfig"]


def test_no_namespace_selector_when_nothing_is_excluded() -> None:
    webhook = the_webhook(webhook_configuration(Config(excluded_namespaces=()), url="https://h/mutate"))
    assert "namespaceSelector" not in webhook


@pytest.mark.parametrize(("kwargs", "want"), [
    ({}, "exactly one"),
    ({"url": "https://h/mutate", "service": {"namespace": "n", "name": "s"}}, "exactly one"),
    ({"url": "http://h/mutate"}, "https://"),
    ({"service": {"name": "s"}}, "namespace"),
    ({"url": "https://h/mutate", "timeout_seconds": 31}, "timeout_seconds"),
])
def test_a_bad_target_is_refused_with_a_reason(kwargs: dict[str, Any], want: str) -> None:
    with pytest.raises(ValueError, match=want):
        webhook_configuration(Config(), **kwargs)


def test_the_expressions_name_the_configured_prefix_and_every_troupe_key() -> None:
    expressions = " ".join(c["expression"] for c in match_conditions(PFN))
    for key in ("'gang-scheduling.preferred.jp/gang-name'", "'gang-scheduling.preferred.jp/gang-size'",
                "'gang-scheduling.preferred.jp/gang-schedule-timeout-seconds'",
                "'troupe.io/topology-required-level'", "'troupe.io/topology-preferred-level'",
                "'deviceshare.io/group'", "'reconciler.troupe.io/'", "'deviceshare.io/env.'",
                "'deviceshare.io/selected-devices'", "'gke.io/topology-aware-auto-'", "oldObject != null"):
        assert key in expressions
    assert "troupe.io/gang-name" not in expressions


def test_a_cel_string_escapes_quotes_and_backslashes() -> None:
    assert cel_string("it's a\\b") == "'it\\'s a\\\\b'"
    env = celpy.Environment()
    assert env.program(env.compile(cel_string("it's a\\b"))).evaluate({}) == "it's a\\b"


# --- Which requests reach the webhook --------------------------------------------------


class _Object(celpy.celtypes.MapType):  # type: ignore[misc, name-defined]
    """A top-level object variable. cel-go (kube-apiserver) compares any value with null
    (heterogeneous equality); cel-python does for ``==`` but not ``!=``, so add it."""

    def __ne__(self, other: Any) -> bool:
        return True if other is None else bool(super().__ne__(other))


def _cel(value: Any) -> Any:
    return None if value is None else _Object(celpy.json_to_cel(value))


_programs: dict[Config, list[Any]] = {}


def _compiled(config: Config) -> list[Any]:
    if config not in _programs:
        env = celpy.Environment()
        _programs[config] = [env.program(env.compile(c["expression"])) for c in match_conditions(config)]
    return _programs[config]


def sent(config: Config, operation: str, obj: dict[str, Any] | None, old: dict[str, Any] | None = None,
         user: str = ALICE, sub_resource: str = "") -> bool:
    """Whether every matchCondition holds for this request (so kube-apiserver calls the webhook)."""
    activation = {
        "object": _cel(obj), "oldObject": _cel(old),
        "request": _cel({"operation": operation, "userInfo": {"username": user, "groups": []},
                         "namespace": "ml", "name": "w-0", "subResource": sub_resource}),
    }
    results = [program.evaluate(activation) for program in _compiled(config)]
    assert all(isinstance(r, celpy.celtypes.BoolType) for r in results), results
    return all(bool(r) for r in results)


@dataclass
class Case:
    name: str
    operation: str
    obj: dict[str, Any]
    old: dict[str, Any] | None = None
    user: str = ALICE
    config: Config = Config()  # noqa: RUF009  Config is frozen
    want_sent: bool = True
    sub_resource: str = ""


PLACED = make_pod().gang().annotate("reconciler.troupe.io/node", "node-a").obj()
GANG = make_pod().gang().obj()
GATED = make_pod().gang().gate("troupe.io/placement").obj()


def _with(pod: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``pod`` with metadata fields replaced (``annotations=``, ``finalizers=``...)."""
    return {**pod, "metadata": {**pod["metadata"], **fields}}


RELEASED = _with(PLACED, finalizers=["batch.kubernetes.io/job-tracking"])
RELEASED_NO_FINALIZER = _with(PLACED, finalizers=[])
MOVED = _with(PLACED, annotations={**PLACED["metadata"]["annotations"], "reconciler.troupe.io/node": "node-b"})
CASES = [
    Case("a gang member is sent on create", "CREATE", GANG),
    Case("a pod with only a size key is sent (to be denied)", "CREATE",
         make_pod().annotate("troupe.io/gang-size", "0").obj()),
    Case("a topology request is sent", "CREATE",
         make_pod().annotate("troupe.io/topology-preferred-level", "x").obj()),
    Case("a shared device group member is sent", "CREATE", make_pod().annotate("deviceshare.io/group", "a").obj()),
    Case("a pod that asks with Kueue's topology annotation is sent", "CREATE",
         make_pod().annotate("kueue.x-k8s.io/podset-required-topology", "x").obj()),
    Case("a pod with Kueue's slice constraints is sent", "CREATE",
         make_pod().annotate("kueue.x-k8s.io/podset-slice-required-topology-constraints", "[]").obj()),
    Case("a pod with only Kueue's queue name is not sent", "CREATE",
         make_pod().annotate("kueue.x-k8s.io/queue-name", "q").obj(), want_sent=False),
    Case("a minimum size is sent", "CREATE", make_pod().annotate("troupe.io/gang-min-size", "2").obj()),
    Case("a failure policy is sent", "CREATE",
         make_pod().annotate("troupe.io/gang-failure-policy", "RestartGang").obj()),
    Case("a pod created with a GKE topology gate is sent", "CREATE",
         make_pod().gate("gke.io/topology-aware-auto-job").obj()),
    Case("a pod created with a reserved annotation is sent (to be denied)", "CREATE",
         make_pod().annotate("deviceshare.io/env.NVIDIA_VISIBLE_DEVICES", "0").obj()),
    Case("the PFN keys are sent when their prefix is configured", "CREATE",
         make_pod().gang(prefix="gang-scheduling.preferred.jp/gang").obj(), config=PFN),
    Case("the PFN keys are not sent under the default prefix", "CREATE",
         make_pod().gang(prefix="gang-scheduling.preferred.jp/gang").obj(), want_sent=False),
    Case("the default keys are not sent under the PFN prefix", "CREATE", GANG, config=PFN, want_sent=False),
    Case("a plain pod is not sent", "CREATE", make_pod().container().obj(), want_sent=False),
    Case("a pod with other annotations and gates is not sent", "CREATE",
         make_pod().annotate("example.com/a", "b").gate("example.com/quota").obj(), want_sent=False),
    Case("a pod with a gate that has no name is not sent and does not fail", "CREATE",
         dict(make_pod().obj(), spec={"schedulingGates": [{}]}), want_sent=False),
    Case("a pod without metadata annotations at all is not sent", "CREATE", {"metadata": {}}, want_sent=False),
    Case("an update adding a reserved annotation is sent", "UPDATE", PLACED, old=GANG),
    Case("an update removing a reserved annotation is sent", "UPDATE", GANG, old=PLACED),
    Case("an update that keeps a placed pod's decisions is not sent", "UPDATE", PLACED, old=PLACED,
         want_sent=False),
    Case("the Job controller removing its finalizer from a released pod is not sent", "UPDATE",
         RELEASED_NO_FINALIZER, old=RELEASED, want_sent=False),
    Case("an update changing a decision's value is sent", "UPDATE", MOVED, old=PLACED),
    Case("an update changing another annotation of a placed pod is not sent", "UPDATE",
         _with(PLACED, annotations={**PLACED["metadata"]["annotations"], "example.com/x": "y"}), old=PLACED,
         want_sent=False),
    Case("a status update adding a decision is sent", "UPDATE", PLACED, old=GANG, sub_resource="status"),
    Case("a status update keeping the decisions is not sent", "UPDATE", _with(PLACED, labels={"a": "b"}),
         old=PLACED, sub_resource="status", want_sent=False),
    Case("the reconciler's status update is not sent", "UPDATE", PLACED, old=GANG, user=RECONCILER,
         sub_resource="status", want_sent=False),
    Case("an update changing the gang size is sent", "UPDATE", make_pod().gang(size="8").obj(), old=GANG),
    Case("an update adding gang keys to a plain pod is sent", "UPDATE", GANG, old=make_pod().obj()),
    Case("an update removing the device group is sent", "UPDATE", make_pod().obj(),
         old=make_pod().annotate("deviceshare.io/group", "a").obj()),
    Case("an update changing the configured prefix's keys is sent", "UPDATE",
         make_pod().gang(size="8", prefix="gang-scheduling.preferred.jp/gang").obj(),
         old=make_pod().gang(prefix="gang-scheduling.preferred.jp/gang").obj(), config=PFN),
    Case("an update changing another prefix's keys is not sent", "UPDATE", make_pod().gang(size="8").obj(),
         old=GANG, config=PFN, want_sent=False),
    Case("an update of a gang member without decisions is not sent", "UPDATE", GANG, old=GANG, want_sent=False),
    Case("an update of a pod without annotations is not sent", "UPDATE", {"metadata": {}},
         old={"metadata": {}}, want_sent=False),
    Case("the reconciler's own update is not sent", "UPDATE", PLACED, old=GANG, user=RECONCILER, want_sent=False),
    Case("an update lifting Troupe's gate is sent", "UPDATE", GANG, old=GATED),
    Case("an update keeping Troupe's gate is not sent", "UPDATE", GATED, old=GATED, want_sent=False),
    Case("an update lifting another gate is not sent", "UPDATE", GATED,
         old=make_pod().gang().gate("example.com/quota").gate("troupe.io/placement").obj(), want_sent=False),
    Case("the reconciler's create is still sent", "CREATE", GANG, user=RECONCILER),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_match_conditions_send_exactly_troupe_pods(case: Case) -> None:
    assert sent(case.config, case.operation, case.obj, case.old, case.user, case.sub_resource) == case.want_sent


# --- Not sending is safe: the webhook would have allowed it untouched --------------------

_KEYS = ["reconciler.troupe.io/node", "reconciler.troupe.io/rank", "deviceshare.io/env.NVIDIA_VISIBLE_DEVICES",
         "deviceshare.io/selected-devices", "troupe.io/gang-name", "troupe.io/gang-size",
         "troupe.io/topology-required-level", "deviceshare.io/group", "example.com/team", "deviceshare.io/envy"]
_annotations = st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(["a", "b", "4"]), max_size=5)
_gates = st.lists(st.sampled_from(["troupe.io/placement", "example.com/quota"]), max_size=2, unique=True)


def _pod(annotations: dict[str, str] | None, gates: list[str]) -> dict[str, Any]:
    pod = make_pod().obj()
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


@settings(max_examples=300, deadline=None)
@given(old_ann=st.none() | _annotations, new_ann=st.none() | _annotations, old_gates=_gates, new_gates=_gates,
       user=st.sampled_from([ALICE, RECONCILER]), status=st.booleans())
def test_an_update_that_is_not_sent_is_one_the_webhook_allows_untouched(
    old_ann: dict[str, str] | None, new_ann: dict[str, str] | None, old_gates: list[str], new_gates: list[str],
    user: str, status: bool,
) -> None:
    old, new = _pod(old_ann, old_gates), _pod(new_ann, new_gates)
    answer = mutate(make_review(new, operation="UPDATE", old=old, user=user,
                                sub_resource="status" if status else None), Config())["response"]
    if not sent(Config(), "UPDATE", new, old, user, "status" if status else ""):
        assert answer == {"uid": "uid-1", "allowed": True}
    if not answer["allowed"]:
        assert sent(Config(), "UPDATE", new, old, user, "status" if status else "")


@settings(max_examples=200, deadline=None)
@given(ann=st.none() | _annotations, gates=_gates, user=st.sampled_from([ALICE, RECONCILER]))
def test_a_create_that_is_not_sent_is_one_the_webhook_allows_untouched(
    ann: dict[str, str] | None, gates: list[str], user: str
) -> None:
    pod = _pod(ann, gates)
    if not sent(Config(), "CREATE", pod, None, user):
        assert mutate(make_review(pod, user=user), Config())["response"] == {"uid": "uid-1", "allowed": True}
