"""Troupe's gang annotations declare the gang (``seeds/001``): ``<prefix>-name``,
``-size``, ``-schedule-timeout-seconds`` make gang ``<namespace>/<name>`` of the annotated
size (:func:`~reconciler.engine.model.declared.base.keyed`); a name that cannot be read
makes the pod's own gang of one, held with the parse error. A Kueue plain-pod group
(``kueue.x-k8s.io/pod-group-name`` and ``-total-count``) arrives here too: the webhook
writes it as these keys at admission (docs/decisions/039-kueue-annotations.md).
"""

from __future__ import annotations

from reconciler.engine.model.declared.base import Shape, Sizing, Source, keyed, named_key
from reconciler.engine.model.declared.memberkeys import gang_keys
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config


class Annotations(Source):
    """The gang Troupe's keys name (after :class:`~reconciler.engine.model.declared.workload.
    Workload`, which takes ``<prefix>-size: auto``)."""

    name = "annotations"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/<name>`` of a pod with ``<prefix>-name``, ``-size`` or
        ``-schedule-timeout-seconds`` (``<namespace>/pod:<pod>`` when the name cannot be
        read), else None."""
        keys, a = gang_keys(config.gang_annotation_prefix), pod.gang_annotations
        if not a or not (keys.name in a or keys.size in a or keys.timeout in a):
            return None
        return named_key(pod, config)

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """Sized by the keys (:func:`~reconciler.engine.model.declared.base.keyed`)."""
        return keyed(shape, sizing)
