"""The writer port of ProvisioningRequests (``autoscaling.x-k8s.io/v1``) and the PodTemplates
they name: a gang's request made and deleted (docs/decisions/080-provisioning-requests.md).

:class:`CapacityWrites` makes them over four primitives an implementation provides
(``_read_pod``, ``_create``, ``_delete``, and :meth:`~CapacityWrites.emit_event`):
:class:`reconciler.kube.writer.capacity.KubeCapacityWrites` against the API server,
:class:`reconciler.ports.fake.capacity.FakeCapacityWrites` in memory. The bodies are built
here (:func:`template_body`, :func:`request_body`) so both write the same objects.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Mapping
from typing import Any

from reconciler.engine.decision.actions import DropCapacityRequest, RequestCapacity
from reconciler.engine.gangs.capacity import ATTEMPT_ANNOTATION, OwnerRef
from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Conflict, Fenced, Gone
from troupe import contract
from troupe import provisioning as pr

#: The annotation that counts a gang's requests (1 for its first): the backoff doubles with it.
ATTEMPT = ATTEMPT_ANNOTATION
#: The label on a request and its templates naming the gang's request (so ``kubectl get
#: podtemplates -l`` finds them).
REQUEST_LABEL = "troupe.io/provisioning-request"
#: What of a member's spec a template keeps out: where it was put, and gates no template has.
_DROPPED = ("nodeName", "schedulingGates")

PODTEMPLATE, PROVISIONINGREQUEST = "PodTemplate", pr.KIND


def owner_reference(owner: OwnerRef) -> dict[str, Any]:
    """``owner`` as an ``ownerReferences`` entry (not the controller: the workload controls its pods)."""
    return {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid}


def template_body(name: str, request: str, namespace: str, owner: OwnerRef, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The PodTemplate ``name`` copying member ``pod``'s spec (its containers' requests, node
    selection, affinity, tolerations, priority) without ``nodeName`` and the scheduling gates
    (Kubernetes API: a PodTemplate's ``template`` is a PodTemplateSpec), its labels kept:
    what cluster-autoscaler simulates a pod of the request from."""
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k not in _DROPPED}
    labels = dict((pod.get("metadata") or {}).get("labels") or {})
    return {"apiVersion": "v1", "kind": PODTEMPLATE,
            "metadata": {"name": name, "namespace": namespace, "labels": {REQUEST_LABEL: request},
                         "ownerReferences": [owner_reference(owner)]},
            "template": {"metadata": {"labels": labels}, "spec": spec}}


def request_body(action: RequestCapacity) -> dict[str, Any]:
    """The ProvisioningRequest of ``action`` (``spec.provisioningClassName``,
    ``spec.parameters``, ``spec.podSets`` of ``podTemplateRef.name`` and ``count``:
    cluster-autoscaler's ``apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go``)."""
    return {"apiVersion": f"{pr.GROUP}/{pr.VERSION}", "kind": pr.KIND,
            "metadata": {"name": action.name, "namespace": action.namespace,
                         "labels": {REQUEST_LABEL: action.name},
                         "annotations": {ATTEMPT: str(action.attempt), contract.GANG_KEY_ANNOTATION: action.gang},
                         "ownerReferences": [owner_reference(action.owner)]},
            "spec": {"provisioningClassName": action.class_name, "parameters": dict(action.parameters),
                     "podSets": [{"podTemplateRef": {"name": s.template}, "count": s.count} for s in action.pod_sets]}}


class CapacityWrites(Fenced, abc.ABC):
    """A gang's ProvisioningRequest and PodTemplates made and deleted; every write passes the fence."""

    @abc.abstractmethod
    def _read_pod(self, pod: PodKey) -> dict[str, Any]:
        """The pod object ``pod`` (a read). Raises :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body`` (a ``PodTemplate`` or a ``ProvisioningRequest``: ``kind``) in
        ``namespace``; returns it. Raises :class:`~reconciler.ports.base.Conflict` (one of
        that name exists), :class:`~reconciler.ports.base.Gone` (the namespace or, for a
        request, its API is not there), :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _delete(self, kind: str, namespace: str, name: str, uid: str) -> None:
        """Delete the object if its UID is still ``uid`` (any when ``""``). Raises
        :class:`~reconciler.ports.base.Gone` (none, or another UID),
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def emit_event(self, regarding: PodKey, api_version: str, kind: str, event_type: str, reason: str,
                   message: str) -> None:
        """Record an Event (``event_type`` ``Normal`` or ``Warning``) on the object
        ``regarding`` (namespace and name) of ``api_version`` and ``kind``; best effort, never raises."""

    def request(self, action: RequestCapacity) -> dict[str, Any]:
        """Carry out ``action``: delete the request it replaces (and its templates), create a
        template per pod set from its model member, then the request; returns the request.
        A template or request of that name already there is taken as made (a write retried,
        a leader that made it before it lost its Lease): the request's owner and class are
        what the next decision checks. Raises :class:`~reconciler.ports.base.LostLeadership`,
        :class:`~reconciler.ports.base.Gone` (a model member or the API is gone),
        :class:`~reconciler.ports.base.WriteError`."""
        self.fence.check()
        if action.replaces:
            self.drop(DropCapacityRequest(action.namespace, action.name, action.replaces, "replaced",
                                          action.replaced_templates))
        for pod_set in action.pod_sets:
            body = template_body(pod_set.template, action.name, action.namespace, action.owner,
                                 self._read_pod(pod_set.model.key))
            with contextlib.suppress(Conflict):  # made already: same name, same shape
                self._create(PODTEMPLATE, action.namespace, body)
        try:
            return self._create(PROVISIONINGREQUEST, action.namespace, request_body(action))
        except Conflict:
            return {}

    def drop(self, action: DropCapacityRequest) -> None:
        """Delete the request (under its UID) and its templates; what is gone already is
        taken as deleted. Raises :class:`~reconciler.ports.base.LostLeadership`,
        :class:`~reconciler.ports.base.WriteError`."""
        self.fence.check()
        for kind, name, uid in [(PROVISIONINGREQUEST, action.name, action.uid),
                                *((PODTEMPLATE, t, "") for t in action.templates)]:
            with contextlib.suppress(Gone):
                self._delete(kind, action.namespace, name, uid)
