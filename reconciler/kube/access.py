"""The reviews of :class:`reconciler.daemon.access.Access` against the API server
(:class:`KubeReviews`): a TokenReview says whom a bearer token authenticates, a
SubjectAccessReview whether that caller may list a namespace's pods. The reconciler's
ClusterRole grants ``create`` on both (what the ``system:auth-delegator`` role grants
kube-rbac-proxy)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from reconciler.daemon.access import Caller
from reconciler.kube.client import REQUEST_TIMEOUT


class KubeReviews:
    """:class:`~reconciler.daemon.access.Reviews` through ``api`` (a ``kubernetes`` API
    client). Each call is one request, bounded by the client's request timeout; an API
    error or a timeout raises (the page's caller then gets a 503)."""

    def __init__(self, api: Any) -> None:
        self.authentication = client.AuthenticationV1Api(api)
        self.authorization = client.AuthorizationV1Api(api)

    def authenticate(self, token: str) -> Caller | None:
        """Whom ``token`` authenticates (``authentication.k8s.io/v1`` TokenReview), or None."""
        review = self.authentication.create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)), _request_timeout=REQUEST_TIMEOUT)
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        return Caller(user.username or "", user.uid or "", tuple(user.groups or ()),
                      {k: tuple(v) for k, v in (user.extra or {}).items()})

    def may_list_pods(self, caller: Caller, namespace: str) -> bool:
        """Whether ``caller`` may list pods in ``namespace`` (``""``: every namespace), as an
        ``authorization.k8s.io/v1`` SubjectAccessReview answers."""
        spec = client.V1SubjectAccessReviewSpec(
            user=caller.username, uid=caller.uid or None, groups=list(caller.groups) or None,
            extra={k: list(v) for k, v in caller.extra.items()} or None,
            resource_attributes=client.V1ResourceAttributes(verb="list", resource="pods", namespace=namespace or None))
        review = self.authorization.create_subject_access_review(client.V1SubjectAccessReview(spec=spec),
                                                                 _request_timeout=REQUEST_TIMEOUT)
        return bool(review.status is not None and review.status.allowed)
