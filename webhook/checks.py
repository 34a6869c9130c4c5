"""The checks of an admission request that need no configuration: its AdmissionReview
envelope, and the bound on a Troupe pod's containers (docs/decisions/028-webhook-bounds-and-server.md).
Pure: no I/O; :mod:`webhook.admission` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The only AdmissionReview version Troupe registers for (``admissionReviewVersions``).
API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

#: The most containers, init containers and ephemeral containers in all that a pod with a
#: Troupe key may have (Kubernetes sets no bound; decision 028).
MAX_CONTAINERS = 100
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def container_count_error(spec: Mapping[str, Any]) -> str | None:
    """Why ``spec`` (a pod's) has too many containers, or None: more than
    :data:`MAX_CONTAINERS` in ``containers``, ``initContainers`` and ``ephemeralContainers``
    together (lists only; other shapes are refused where they are read)."""
    counts = {name: len(value) for name in _CONTAINER_LISTS if isinstance(value := spec.get(name), list)}
    total = sum(counts.values())
    if total <= MAX_CONTAINERS:
        return None
    each = ", ".join(f"spec.{name}: {n}" for name, n in counts.items() if n)
    return (f"spec.containers + spec.initContainers + spec.ephemeralContainers = {total} ({each}): "
            f"a pod with Troupe annotations may have at most {MAX_CONTAINERS} containers in all")


def envelope_error(review: object) -> str | None:
    """Why ``review`` is not an AdmissionReview v1 request this webhook can answer, or None.

    Checks only the envelope: a JSON object with ``apiVersion: admission.k8s.io/v1``,
    ``kind: AdmissionReview`` and a ``request`` object carrying a non-empty string ``uid``.
    The Flask adapter answers HTTP 400 when this returns a reason.
    """
    if not isinstance(review, dict):
        return "body must be a JSON object (an AdmissionReview)"
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        return (
            f"body must be an AdmissionReview of apiVersion {API_VERSION}, got "
            f"apiVersion={review.get('apiVersion')!r} kind={review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        return "request: must be an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return "request.uid: must be a non-empty string"
    return None
