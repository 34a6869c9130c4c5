"""Troupe's gate and nothing else declares a gang of one (a topology or device-group
request alone): ``<namespace>/pod:<pod name>``, placed on its own. Pods are never grouped
by their owner without being asked: a Job whose pods carry only a topology request gets
each pod placed alone, never a wait for peers it did not name.
"""

from __future__ import annotations

import troupe.contract as contract
from reconciler.engine.model.declared.base import Shape, Sizing, Source, alone
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config


class Alone(Source):
    """The gang of one of a pod Troupe gates that names no gang."""

    name = "alone"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/pod:<pod>`` of a pod carrying Troupe's gate, else None."""
        return f"{pod.namespace}/pod:{pod.name}" if contract.GATE in pod.gates else None

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """Size 1 (:func:`~reconciler.engine.model.declared.base.alone`)."""
        return alone(shape, sizing)
