"""The writer port of Gang objects (``gangs.troupe.io``, namespaced): made with their gang,
their status, deleted with it (docs/decisions/043-gang-objects.md).

:class:`GangObjectWrites` makes them over five primitives an implementation provides
(``_list_gang_objects``, ``_get_gang_object``, ``_create_gang_object``,
``_patch_gang_object_status``, ``_delete_gang_object``): :class:`reconciler.kube.writer.gangobjects.KubeGangObjectWrites`
against the API server, :class:`reconciler.ports.fake.gangobjects.FakeGangObjectWrites`
in memory.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from reconciler.ports.base import Fenced


class GangObjectWrites(Fenced, abc.ABC):
    """A Gang object's creation, status and deletion; every write passes the fence."""

    @abc.abstractmethod
    def _list_gang_objects(self) -> list[dict[str, Any]]:
        """Every Gang object of every namespace. Raises
        :class:`~reconciler.ports.base.WriteError` (one that cannot be listed)."""

    @abc.abstractmethod
    def _get_gang_object(self, namespace: str, name: str) -> dict[str, Any]:
        """The Gang object ``namespace/name``. Raises
        :class:`~reconciler.ports.base.Gone` (there is none),
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body`` in ``namespace``; returns the object. Raises
        :class:`~reconciler.ports.base.Conflict` (one of that name exists),
        :class:`~reconciler.ports.base.Gone` (the namespace is gone or terminating),
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _patch_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the object's ``status`` through its status subresource (a JSON patch
        ``add /status``); returns the object. Raises
        :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _delete_gang_object(self, namespace: str, name: str, uid: str) -> None:
        """Delete the object if its UID is still ``uid`` (any when ``""``). Raises
        :class:`~reconciler.ports.base.Gone` (no such object, or another UID),
        :class:`~reconciler.ports.base.WriteError`."""

    def list_gang_objects(self) -> list[dict[str, Any]]:
        """Every Gang object (a read: no fence). Raises
        :class:`~reconciler.ports.base.WriteError`."""
        return self._list_gang_objects()

    def get_gang_object(self, namespace: str, name: str) -> dict[str, Any]:
        """One Gang object (a read: no fence). Raises as :meth:`_get_gang_object`."""
        return self._get_gang_object(namespace, name)

    def create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a Gang object (``metadata`` with name, labels, annotations and owner
        references, ``spec``); returns it. Raises as :meth:`_create_gang_object`."""
        self.fence.check()
        return self._create_gang_object(namespace, body)

    def set_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a Gang object's whole status; returns the object. Raises as
        :meth:`_patch_gang_object_status`."""
        self.fence.check()
        return self._patch_gang_object_status(namespace, name, status)

    def delete_gang_object(self, namespace: str, name: str, uid: str = "") -> None:
        """Delete a Gang object (with a UID precondition when ``uid``). Raises as
        :meth:`_delete_gang_object`."""
        self.fence.check()
        self._delete_gang_object(namespace, name, uid)
