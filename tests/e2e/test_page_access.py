"""Who reads the reconciler's pages of gangs on the live cluster (reconciler.daemon.access;
docs/decisions/049-hostile-tenants-third-round.md, point 8, and
docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md).

Two tokens of one ServiceAccount, each from the TokenRequest API, authenticate the same user,
uid and groups; kube-apiserver's TokenReview tells them apart by ``extra``
(``authentication.kubernetes.io/credential-id``, the token's JTI). The stock authorizers
(RBAC, Node) answer them alike, so what the test can see is who is asked: each token's first
read of ``/debug/gangs`` sends SubjectAccessReviews of its own (counted by the reconciler's
``troupe_kube_api_requests_total``), and a second read of the same token sends none. An
authorizer that decides by ``extra`` (OpenShift's scopes, a webhook keyed on the credential)
then answers each token for itself, which the unit tests show with such an authorizer
(tests/reconciler/daemon/test_access.py).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kubernetes import client

from tests.support.e2e import service_account_token

CREDENTIAL = "authentication.kubernetes.io/credential-id"
SERIES = "troupe_kube_api_requests_total{"


def reviews_sent(port: int) -> float:
    """SubjectAccessReviews the reconciler has sent so far, whatever the answer's code (its
    ``/metrics``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(SERIES) and 'resource="subjectaccessreviews"' in line and 'verb="create"' in line)


def debug_gangs(port: int, token: str) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/debug/gangs", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return list(json.load(r))


def reader_tokens(admin_api: Any, namespace: str) -> tuple[str, str]:
    """Two tokens of ServiceAccount ``reader`` of ``namespace``, which may list the pods of
    ``namespace`` only."""
    core, rbac = client.CoreV1Api(admin_api), client.RbacAuthorizationV1Api(admin_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    return service_account_token(core, namespace, "reader"), service_account_token(core, namespace, "reader")


def test_each_token_of_one_user_is_reviewed_for_itself_and_kept_for_itself(troupe, admin_api, namespace):
    one, two = reader_tokens(admin_api, namespace)
    authn = client.AuthenticationV1Api(admin_api)
    users = [authn.create_token_review({"spec": {"token": t}}).status.user for t in (one, two)]
    assert users[0].username == users[1].username == f"system:serviceaccount:{namespace}:reader"
    assert (users[0].uid, users[0].groups) == (users[1].uid, users[1].groups)
    assert users[0].extra[CREDENTIAL] != users[1].extra[CREDENTIAL], "one user, two credentials"
    port = troupe.metrics_port

    before = reviews_sent(port)
    debug_gangs(port, one)
    first = reviews_sent(port)
    debug_gangs(port, one)
    again = reviews_sent(port)
    debug_gangs(port, two)
    second = reviews_sent(port)

    assert first > before, "the first token's own reviews"
    assert again == first, "kept for that token"
    assert second > again, "the second token is reviewed for itself, not given the first one's answers"
