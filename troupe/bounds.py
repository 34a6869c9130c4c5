"""The bounds on what one pod may ask of the pods around it, shared by the webhook (which
refuses a Troupe pod past them) and the engine (which holds a gang with such a member, and
reads at most this much of any other pod): docs/decisions/049-hostile-tenants-third-round.md.

kube-scheduler sets no bound on a pod's required pod (anti-)affinity terms or topology
spread constraints; the API server admits thousands under its object size limit, and each
costs the engine a count per domain for every gang planned. A training job uses a handful.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Required pod affinity terms, required pod anti-affinity terms and topology spread
#: constraints one pod may carry, each list on its own.
MAX_POD_TERMS = 64

#: The lists bounded, by their path below ``spec``.
TERM_LISTS = (
    ("affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("topologySpreadConstraints",),
)


def _length(spec: Mapping[str, Any], path: tuple[str, ...]) -> int:
    value: Any = spec
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return len(value) if isinstance(value, list) else 0


def pod_terms_error(spec: Mapping[str, Any]) -> str | None:
    """Why a pod ``spec`` carries more than :data:`MAX_POD_TERMS` entries in one of
    :data:`TERM_LISTS`, naming the field and the count; None when it does not (a list of
    the wrong shape is left to where it is read)."""
    over = [f"spec.{'.'.join(path)}: {n}" for path in TERM_LISTS if (n := _length(spec, path)) > MAX_POD_TERMS]
    if not over:
        return None
    return (f"{', '.join(over)} entries: Troupe evaluates at most {MAX_POD_TERMS} required pod affinity terms, "
            f"{MAX_POD_TERMS} required anti-affinity terms and {MAX_POD_TERMS} topology spread constraints of a pod")
