"""The backoff after a failed attempt: a release rolled back at its timeout
(docs/decisions/005), a ProvisioningRequest that failed or expired
(docs/decisions/080-provisioning-requests.md). One law for both. Pure."""

from __future__ import annotations

#: The first retry after this many seconds, doubled per attempt, at most
#: :data:`BACKOFF_MAX_SECONDS`.
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0


def backoff(attempt: int) -> float:
    """Seconds before the attempt after attempt ``attempt`` (1 for the first: 10 s, then 20,
    40... at most 300)."""
    return float(min(BACKOFF_BASE_SECONDS * 2 ** (max(attempt, 1) - 1), BACKOFF_MAX_SECONDS))
