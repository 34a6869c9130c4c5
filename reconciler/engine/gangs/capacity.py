"""A gang's ProvisioningRequest, as plain data: what it may ask, what it asked, what it was told.

A gang that does not fit asks the cluster's autoscaler for its whole room in one
ProvisioningRequest (``autoscaling.x-k8s.io/v1``; :mod:`troupe.provisioning`;
docs/decisions/080-provisioning-requests.md). Here:

- :class:`Ask`: whether and how a gang may ask (the ``provisioning`` key's class and
  parameters for the gang's namespace, and the object that owns its request), resolved by
  :func:`ask_for`; None on a gang: it asks nothing.
- :class:`Observed`: the request of the gang's name in the cluster, as the caller read it
  (its owner, its attempt, its conditions; :func:`parse_request`); :meth:`Observed.state`
  is the condition that tells where it is. :func:`owner_of`: the object that owns it.
- :func:`request_name`: the one name a gang's request has, so a restart or a second
  replica finds it instead of making another; :func:`pod_sets`: the members' distinct
  shapes (what placement reads of them: requests and node filter, tolerations included) and
  the count of each, each with a template name.
- :func:`retry_at`: when a request that failed, expired or whose nodes did not fit is made
  again: the rollback's backoff (:func:`reconciler.engine.gangs.backoff.backoff`: 10 s
  doubled per attempt, at most 300 s).

Pure: no Kubernetes client, no clock, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.engine.gangs.backoff import backoff
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from troupe.provisioning import (
    ACCEPTED,
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    FAILED,
    PROVISIONED,
    Provisioning,
)

#: The annotation that counts a gang's requests (1 for its first): the backoff doubles with it.
ATTEMPT_ANNOTATION = "reconciler.troupe.io/attempt"
#: A DNS-1123 subdomain is at most 253 characters; the names are kept within a label (63),
#: which every kind accepts, with room for a template's suffix.
_NAME_MAX = 63
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class OwnerRef:
    """The object that owns a gang's request and templates (its workload, else its Gang
    object): ``api_version``, ``kind``, ``name``, ``uid``. Deleting it deletes them (the
    garbage collector), and a request not owned by it is not the gang's."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Ask:
    """What a gang may ask: ``class_name`` and ``parameters`` (``spec.provisioningClassName``,
    ``spec.parameters``), ``prefer_preemption`` (evict first when that makes room) and
    ``owner``: the request's owner (None: no owner is known yet, so nothing is asked)."""

    class_name: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    prefer_preemption: bool = True
    owner: OwnerRef | None = None


def ask_for(config: Provisioning | None, namespace_labels: Mapping[str, str], owner: OwnerRef | None) -> Ask | None:
    """The :class:`Ask` of a gang in a namespace with ``namespace_labels`` under the
    ``provisioning`` key ``config`` (None: off, so None), or None when the key's
    ``namespaceSelector`` does not select that namespace."""
    if config is None or not config.selects(namespace_labels):
        return None
    return Ask(config.class_name, dict(config.parameters), config.prefer_preemption, owner)


@dataclass(frozen=True)
class Condition:
    """One of a request's ``status.conditions``: ``type``, ``status`` (``"True"``...),
    ``reason``, ``message`` and ``at`` (``lastTransitionTime``, RFC 3339, ``""``)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    at: str = ""


@dataclass(frozen=True)
class Observed:
    """A ProvisioningRequest as the caller read it: ``namespace``, ``name``, ``uid``,
    ``owner_uids`` (its ``ownerReferences``), ``class_name``, ``attempt`` (Troupe's
    :data:`ATTEMPT_ANNOTATION`: 1 for the first request of a gang, 0 when
    absent), ``created`` (RFC 3339), its ``conditions`` and ``templates``: the PodTemplates
    its ``spec.podSets`` name."""

    namespace: str
    name: str
    uid: str
    owner_uids: tuple[str, ...] = ()
    class_name: str = ""
    attempt: int = 0
    created: str = ""
    conditions: tuple[Condition, ...] = ()
    templates: tuple[str, ...] = ()

    def condition(self, kind: str) -> Condition | None:
        """Its condition of type ``kind`` whose status is ``"True"``, or None."""
        return next((c for c in self.conditions if c.type == kind and c.status == "True"), None)

    def state(self) -> tuple[str, Condition | None]:
        """Where it is: ``Failed``, ``BookingExpired``, ``CapacityRevoked`` (it ended),
        ``Provisioned``, ``Accepted``, else ``Pending``; with the condition that says so.
        An ending outranks ``Provisioned``: cluster-autoscaler sets ``BookingExpired`` beside it."""
        for kind in (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED, PROVISIONED, ACCEPTED):
            found = self.condition(kind)
            if found is not None:
                return kind, found
        return "Pending", None

    @property
    def ended(self) -> bool:
        """Failed, expired or revoked: it will not give the gang room."""
        return self.state()[0] in (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)


def _hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _dns(text: str, length: int) -> str:
    """``text`` as the start of a DNS-1123 label, at most ``length`` characters."""
    cleaned = _NOT_DNS.sub("-", text.lower()).strip("-")[:length].strip("-")
    return cleaned or "gang"


def request_name(gang_key: str) -> str:
    """The name of the request of gang ``gang_key`` (``namespace/id``): ``<gang id>-<hash>``,
    the id made a DNS-1123 label (lower case, other characters ``-``), cut so that the whole
    is at most 54 characters, and 8 hex digits of the key's SHA-256: two gangs whose ids
    clean to the same text still differ."""
    gang_id = gang_key.partition("/")[2]
    return f"{_dns(gang_id, 45)}-{_hash(gang_key)}"


@dataclass(frozen=True)
class PodSet:
    """One ``spec.podSets`` entry: ``template`` (the PodTemplate's name), ``count`` members
    of one shape, and ``model``: the member whose spec the template copies (its containers'
    requests, node selection, affinity and tolerations)."""

    template: str
    count: int
    model: PodInfo


def shape_of(pod: PodInfo) -> str:
    """What placement reads of a member, as text: its requests (units) and its node filter
    (node selector, required node affinity, tolerations). Two members of the same text take
    the same room on the same nodes."""
    return repr((sorted(pod.requests.items()), pod.node_filter))


def pod_sets(gang_key: str, members: Sequence[PodInfo]) -> tuple[PodSet, ...]:
    """The members' distinct shapes, in the order their first member comes (rank order),
    each with its count and template name ``<request name>-<hash of the shape>``."""
    name = request_name(gang_key)
    counts: dict[str, list[PodInfo]] = {}
    for pod in members:
        counts.setdefault(shape_of(pod), []).append(pod)
    return tuple(PodSet(f"{name}-{_hash(shape, 5)}", len(pods), pods[0]) for shape, pods in counts.items())



def retry_at(request: Observed, since: str) -> float | None:
    """When a new request may replace ``request`` (seconds since the epoch): ``since`` (RFC
    3339: when it ended, or was found not to fit) plus :func:`backoff` of its attempt; None
    when ``since`` cannot be read (retried at once)."""
    at = epoch(since) if since else None
    return None if at is None else at + backoff(request.attempt)


def owner_of(members: Sequence[PodInfo]) -> OwnerRef | None:
    """The object a gang's request is owned by: its members' controlling owner (the first,
    by API version, kind, name and UID, when they have several: a JobSet's Jobs), None for
    ownerless members (nothing would delete the request with the gang; it asks nothing)."""
    owners = sorted({(p.owner.api_version, p.owner.kind, p.owner.name, p.owner.uid) for p in members if p.owner})
    return OwnerRef(*owners[0]) if owners else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def parse_request(obj: Mapping[str, object]) -> Observed:
    """A ProvisioningRequest object (a mapping as the API returns it) as an :class:`Observed`.
    What cannot be read reads as absent (an unreadable attempt is 0, a malformed condition
    is skipped): a request Troupe did not write is never the gang's anyway (its owner)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    owners = meta.get("ownerReferences")
    uids = tuple(_text(o.get("uid")) for o in owners if isinstance(o, Mapping)) if isinstance(owners, list) else ()
    annotations = meta.get("annotations")
    attempt_text = _text(annotations.get(ATTEMPT_ANNOTATION)) if isinstance(annotations, Mapping) else ""
    conditions = status.get("conditions")
    parsed = tuple(Condition(_text(c.get("type")), _text(c.get("status")), _text(c.get("reason")),
                             _text(c.get("message")), _text(c.get("lastTransitionTime")))
                   for c in (conditions if isinstance(conditions, list) else []) if isinstance(c, Mapping))
    sets = spec.get("podSets")
    templates = tuple(_text(ref.get("name")) for s in (sets if isinstance(sets, list) else [])
                      if isinstance(s, Mapping) and isinstance(ref := s.get("podTemplateRef"), Mapping))
    return Observed(_text(meta.get("namespace")), _text(meta.get("name")), _text(meta.get("uid")), uids,
                    _text(spec.get("provisioningClassName")), int(attempt_text) if attempt_text.isdigit() else 0,
                    _text(meta.get("creationTimestamp")), parsed, templates)
