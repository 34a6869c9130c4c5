"""PodDisruptionBudgets as the preemption planner counts them: which pods a budget covers
and how many of them it lets go at once.

A dry-run eviction is judged pod by pod: a budget that allows one disruption passes the
dry run of every pod of an eight-pod gang, and the real evictions after the first are
refused (docs/decisions/027-hostile-input-first-fixes.md, "Known limit"). So ``atomic``
preemption counts the budgets themselves before it plans: a victim gang may be evicted
whole only if every budget covering its pods allows as many disruptions as it covers of
them (docs/decisions/030-preemption-budgets-and-fences.md).

The rules are the Eviction API's (Kubernetes docs "API-initiated Eviction", the
``pods/eviction`` handler of kube-apiserver, ``pkg/registry/core/pod/storage/eviction.go``):

- a budget covers the pods of its namespace that its ``spec.selector`` matches; in
  ``policy/v1`` an empty selector matches every pod of the namespace and an absent one
  none;
- an eviction is refused (429) unless ``status.disruptionsAllowed`` is at least 1, and each
  one allowed takes one from it; a budget whose status the disruption controller has not
  written yet allows nothing;
- a pod covered by more than one budget is never evicted (the API answers 500);
- a pod that is ``Pending`` (not yet running) or being deleted is evicted whatever the
  budgets say; the caller's candidates are never being deleted, so only ``Pending`` pods
  are left out of the count here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, string, string_map
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.selectors import Requirement, requirements

#: Label-selector operators (``metav1.LabelSelectorOperator``); node-selector-only ``Gt``
#: and ``Lt`` are not among them.
_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget: ``namespace``/``name``, its selector (``match_labels``:
    ``(key, value)`` pairs; ``expressions``: ``matchExpressions``), None when it has none
    (it covers no pod), and ``disruptions_allowed`` (``status.disruptionsAllowed``, 0 when
    the status is not written yet)."""

    namespace: str
    name: str
    match_labels: tuple[tuple[str, str], ...] | None = ()
    expressions: tuple[Requirement, ...] = ()
    disruptions_allowed: int = 0

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodInfo) -> bool:
        """Whether the budget's selector matches ``pod`` (of the same namespace)."""
        if self.match_labels is None or pod.namespace != self.namespace:
            return False
        labels = pod.labels
        return (all(labels.get(key) == value for key, value in self.match_labels)
                and all(requirement.matches(labels.get(requirement.key)) for requirement in self.expressions))

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Budget:
        """A ``policy/v1`` PodDisruptionBudget object; raises
        :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field (a selector
        operator that is not a label selector's, a negative or non-integer count)."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec")
        status = mapping(obj, "status")
        labels: tuple[tuple[str, str], ...] | None = None
        expressions: tuple[Requirement, ...] = ()
        if spec.get("selector") is not None:
            selector = mapping(spec, "selector", "spec")
            labels = tuple(sorted(string_map(selector, "matchLabels", "spec.selector").items()))
            try:
                expressions = requirements(selector, "matchExpressions")
            except ObjectError as bad:
                raise bad.below("spec.selector") from None
            for index, requirement in enumerate(expressions):
                if requirement.operator not in _LABEL_OPERATORS:
                    raise ObjectError(f"spec.selector.matchExpressions[{index}].operator",
                                      f"{requirement.operator!r} is not a label selector operator")
        allowed = status.get("disruptionsAllowed", 0)
        if allowed is None:
            allowed = 0
        if isinstance(allowed, bool) or not isinstance(allowed, int) or allowed < 0:
            raise ObjectError("status.disruptionsAllowed", f"expected a count, got {allowed!r}")
        return cls(string(meta, "namespace", "metadata", default="default"),
                   string(meta, "name", "metadata", required=True), labels, expressions, allowed)


def counted(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """The pods of ``pods`` whose eviction the budgets decide: all but ``Pending`` ones."""
    return [pod for pod in pods if pod.phase != "Pending"]


def budget_refusal(pods: Sequence[PodInfo], budgets: Iterable[Budget]) -> str:
    """Why the Eviction API would refuse to evict every one of ``pods`` (a victim gang's
    pods on nodes) at once, ``""`` when it would not: the first budget (by key) that covers
    more of them than it allows (``"PodDisruptionBudget team-a/keep allows 1
    disruption(s) and covers 8 of the gang's pods"``), or a pod covered by two budgets.
    ``Pending`` pods are evicted whatever the budgets say and are not counted (see the
    module docstring)."""
    evicted = counted(pods)
    namespaces = {pod.namespace for pod in evicted}
    covering: dict[str, list[str]] = {}
    for budget in sorted((b for b in budgets if b.namespace in namespaces), key=lambda b: b.key):
        covered = [pod for pod in evicted if budget.covers(pod)]
        if not covered:
            continue
        if len(covered) > budget.disruptions_allowed:
            return (f"PodDisruptionBudget {budget.key} allows {budget.disruptions_allowed} disruption(s) "
                    f"and covers {len(covered)} of the gang's pods")
        for pod in covered:
            covering.setdefault(pod.key, []).append(budget.key)
    for pod_key, keys in sorted(covering.items()):
        if len(keys) > 1:
            return (f"pod {pod_key} is covered by {len(keys)} PodDisruptionBudgets ({', '.join(keys)}), "
                    f"which the Eviction API never evicts")
    return ""
