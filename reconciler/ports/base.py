"""What every writer port shares: its errors, the :class:`Fence` a write passes first and
the :class:`Fenced` base holding it.

Errors: :class:`Conflict` (the object changed in a way that forbids the write),
:class:`Gone` (it no longer exists, or was replaced by a pod of another UID),
:class:`Refused` (an eviction a PodDisruptionBudget forbids), :class:`LostLeadership`
(this replica may no longer write: its :class:`Fence` is closed), :class:`Unsure` (the
request went out and no answer says whether it was applied: a timeout, a 5xx, a connection
dropped), :class:`WriteError` (anything else: refused, nothing written).
"""

from __future__ import annotations

from typing import Protocol


class WriteError(RuntimeError):
    """A write failed for a reason other than a conflict or a missing object."""


class Unsure(WriteError):
    """A write whose outcome is unknown: it may or may not have been applied (a timeout, a
    connection dropped, HTTP 5xx). Every other :class:`WriteError` means nothing was written."""


class Conflict(WriteError):
    """The object changed since it was read (HTTP 409), in a way the write cannot absorb."""


class Gone(WriteError):
    """The object no longer exists (HTTP 404), was replaced by one of another UID, or a
    watch's resourceVersion expired (410)."""


class Refused(WriteError):
    """An eviction was refused (HTTP 429): a PodDisruptionBudget allows no disruption now."""


class LostLeadership(WriteError):
    """This replica does not hold the Lease, or cannot be sure it still does (its last
    renewal is older than the renew deadline): it must not write."""


class Fence(Protocol):
    """What a write asks before it goes out (:class:`reconciler.daemon.election.Elector`)."""

    def check(self) -> None:
        """Raise :class:`LostLeadership` unless this replica may write now. No I/O."""

    def confirm(self) -> None:
        """:meth:`check`, and ask the API server too (before a batch of writes). Raises
        :class:`LostLeadership`."""


class Unfenced:
    """The fence of a reconciler that runs alone (no leader election): always open."""

    def check(self) -> None:
        """Never raises."""

    def confirm(self) -> None:
        """Never raises."""


#: The open fence.
UNFENCED: Fence = Unfenced()


class Fenced:
    """The base of every writer port: ``fence`` is checked before every primitive write
    (:class:`Unfenced` unless set; docs/decisions/016-bounded-failure-detection.md)."""

    fence: Fence = UNFENCED
