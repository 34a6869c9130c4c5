"""A gang's policies, read from its pod template or workload: how it is released
(``troupe.io/release``, docs/decisions/034-release-as-created.md) and what it does when a
running member fails (``troupe.io/gang-failure-policy``, docs/decisions/040-failure-policy.md).
Re-exported by :mod:`troupe.contract`. Plain values only: no Kubernetes client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from troupe.errors import ContractError

#: How a gang whose members come from one workload is released (on the pod template, or
#: on the workload object): :data:`AS_CREATED`, its nodes reserved from the workload's pod
#: template and count as soon as the workload is seen, each member released onto its
#: rank's node as it is created; or :data:`WHEN_COMPLETE`, no member released before every
#: member exists and fits (the PFN plugin's contract, ``seeds/001``). The configuration's
#: ``releaseMode`` is the default (docs/decisions/034-release-as-created.md).
RELEASE_MODE = "troupe.io/release"
AS_CREATED = "AsCreated"
WHEN_COMPLETE = "WhenComplete"
RELEASE_MODES = (AS_CREATED, WHEN_COMPLETE)

#: What a released gang does when one of its running members fails
#: (docs/decisions/040-failure-policy.md): :data:`REPLACE_MEMBER` (the default), the
#: member's controller recreates it and Troupe places the replacement next to the gang,
#: inside its required domain; :data:`RESTART_GANG`, a member's failure is the gang's:
#: every running member is deleted (``DisruptionTarget``), once, and the gang is placed
#: again whole (Volcano's and JobSet's restart of the whole group).
FAILURE_POLICY = "troupe.io/gang-failure-policy"
REPLACE_MEMBER = "ReplaceMember"
RESTART_GANG = "RestartGang"
FAILURE_POLICIES = (REPLACE_MEMBER, RESTART_GANG)
#: The gang's policy keys: fixed at creation, every member the same, read by the reconciler.
GANG_POLICY_KEYS = (FAILURE_POLICY,)


def _one_of(a: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    """The value of ``key`` in ``a``, else ``default``. Raises :class:`ContractError` naming
    the key and the value when it is not one of ``allowed``."""
    value = a.get(key)
    if value is None:
        return default
    if value not in allowed:
        raise ContractError(key, str(value), f"must be one of {', '.join(allowed)}")
    return str(value)


def parse_release_mode(a: Mapping[str, Any], default: str) -> str:
    """The release mode ``a`` (a pod's or a workload's annotations) asks for with
    :data:`RELEASE_MODE`, else ``default``. Raises :class:`ContractError` naming the key and
    the value when it is not one of :data:`RELEASE_MODES`."""
    return _one_of(a, RELEASE_MODE, RELEASE_MODES, default)


def parse_failure_policy(a: Mapping[str, Any]) -> str:
    """The failure policy annotations ``a`` ask for with :data:`FAILURE_POLICY`, else
    :data:`REPLACE_MEMBER`. Raises :class:`ContractError` naming the key and the value when
    it is not one of :data:`FAILURE_POLICIES`."""
    return _one_of(a, FAILURE_POLICY, FAILURE_POLICIES, REPLACE_MEMBER)
