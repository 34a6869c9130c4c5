"""Members of releases decided but not yet seen written (:class:`Assumptions`), kept by the
cache beside the pods as the informers delivered them: kube-scheduler's assume-then-bind
split, for Troupe's releases (docs/decisions/068-release-pipeline.md).

A release is decided against a snapshot, then written by the release threads while the
worker decides the next gang. From the moment it is decided until the cache sees its
writes, each member is *assumed*: the snapshots the next decisions plan on count the
member on its node as its written pod will count (pinned, its gates gone,
:meth:`~reconciler.engine.decision.actions.MemberRelease.applied`), so no node is given
twice while writes are in flight. An assumption ends in one of four ways:

- the write lands: the pod its response (or the watch) delivers is pinned to the assumed
  node, and the cache holds that pod instead (:meth:`Assumptions.settled_by`);
- the write is refused for sure (a conflict, the pod gone, the fence closed, any 4xx):
  nothing was written, and the assumption is forgotten at once (:meth:`Assumptions.forget`);
- the write's outcome is unknown (a timeout, a 5xx, a connection dropped): the member may
  be pinned or not, so the assumption stays until :data:`UNKNOWN_OUTCOME_SECONDS` have
  passed or the pod shows which, whichever is first (:meth:`Assumptions.expire_after`);
- the pod is deleted or ends.

Not thread-safe on its own: the cache holds its lock around every call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo

#: How long an assumption outlives a write whose outcome is unknown, seconds: long enough for
#: the watch to deliver the pod as written if the write landed (a pod's event reaches the
#: informer within a second on a healthy control plane), short enough that a lost write
#: holds its node no longer than a failed member's backoff would.
UNKNOWN_OUTCOME_SECONDS = 30.0


@dataclass(slots=True)
class Assumed:
    """One assumed member: ``info``, the pod as its release's write will leave it (pinned to
    ``info.assigned_node``), and ``deadline`` (monotonic seconds), when the assumption is
    dropped unless something settled it first (``inf`` while its write is in flight)."""

    info: PodInfo
    deadline: float = math.inf


class Assumptions:
    """The assumed members, by pod key (module docstring); ``clock`` gives monotonic seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._by_key: dict[PodKey, Assumed] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, ref: object) -> bool:
        return ref in self._by_key

    def add(self, info: PodInfo) -> None:
        """Assume ``info`` (a member as its release leaves it) until its write is settled."""
        self._by_key[info.key] = Assumed(info)

    def get(self, ref: PodKey) -> PodInfo | None:
        """The assumed form of pod ``ref``, None when it is not assumed."""
        found = self._by_key.get(ref)
        return None if found is None else found.info

    def settled_by(self, ref: PodKey, real: PodInfo | None) -> bool:
        """Whether ``real`` (the pod ``ref`` as the cache now holds it: None when it is
        gone or cannot be read) ends the assumption of ``ref``: it is pinned to the assumed
        node (the write landed), pinned elsewhere (a member is never pinned twice: the
        cluster's pin wins), or no longer active (deleted, ended). Drops the assumption when
        it does."""
        found = self._by_key.get(ref)
        if found is None:
            return False
        if real is None or not real.active or real.assigned_node:
            del self._by_key[ref]
            return True
        return False

    def forget(self, refs: Iterable[PodKey]) -> list[PodKey]:
        """Drop the assumptions of ``refs`` (their writes were refused for sure); returns
        those that were assumed."""
        return [ref for ref in refs if self._by_key.pop(ref, None) is not None]

    def expire_after(self, refs: Iterable[PodKey], seconds: float = UNKNOWN_OUTCOME_SECONDS) -> None:
        """Keep the assumptions of ``refs`` (writes whose outcome is unknown) for ``seconds``
        more at most."""
        deadline = self.clock() + seconds
        for ref in refs:
            found = self._by_key.get(ref)
            if found is not None:
                found.deadline = min(found.deadline, deadline)

    def expired(self) -> list[PodKey]:
        """Drop and return the assumptions whose deadline has passed."""
        now = self.clock()
        gone = [ref for ref, found in self._by_key.items() if found.deadline <= now]
        for ref in gone:
            del self._by_key[ref]
        return gone
