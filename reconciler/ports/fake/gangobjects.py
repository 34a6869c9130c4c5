"""An in-memory :class:`~reconciler.ports.gangobjects.GangObjectWrites`
(:class:`FakeGangObjectWrites`), with the API server's rules for Gang objects that matter
here."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.ports.base import Conflict, Gone
from reconciler.ports.fake.base import FakeStore
from reconciler.ports.gangobjects import GangObjectWrites


@dataclass
class FakeGangObjectWrites(FakeStore[tuple[str, str]], GangObjectWrites):
    """In-memory :class:`GangObjectWrites` over Gang objects by ``(namespace, name)``
    (``objects``). A create of a name taken raises :class:`~..base.Conflict` (AlreadyExists, a 409);
    a status write or a delete of an object that does not exist, or a delete whose UID
    precondition fails, raises :class:`~..base.Gone`; a created object gets a UID and a
    resourceVersion. ``fail`` maps an object's name to an error its next create or status
    write raises. Every write is recorded in ``writes``, in order: ``("create" | "status" |
    "delete", namespace, name)``, every read in ``reads``. Thread-safe."""

    writes: list[tuple[str, str, str]] = field(default_factory=list)
    #: Every read, in order: ``("list", "", "")`` or ``("get", namespace, name)``.
    reads: list[tuple[str, str, str]] = field(default_factory=list)

    def _list_gang_objects(self) -> list[dict[str, Any]]:
        with self._lock:
            self.reads.append(("list", "", ""))
            return [copy.deepcopy(o) for _, o in sorted(self.objects.items())]

    def _get_gang_object(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            self.reads.append(("get", namespace, name))
            stored = self.objects.get((namespace, name))
            if stored is None:
                raise Gone(f"get gang {namespace}/{name}: not found")
            return copy.deepcopy(stored)

    def _create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            name = body["metadata"]["name"]
            if name in self.fail:
                raise self.fail[name]
            if (namespace, name) in self.objects:
                raise Conflict(f"create gang {namespace}/{name}: already exists")
            stored = copy.deepcopy(dict(body))
            meta = stored["metadata"]
            meta.update(namespace=namespace, uid=f"uid-gang-{self.versions.next()}", resourceVersion=self.versions.next())
            self.objects[(namespace, name)] = stored
            self.writes.append(("create", namespace, name))
            return copy.deepcopy(stored)

    def _patch_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            stored = self._writable((namespace, name), name, f"patch gang {namespace}/{name}/status: not found")
            stored["status"] = copy.deepcopy(dict(status))
            stored["metadata"]["resourceVersion"] = self.versions.next()
            self.writes.append(("status", namespace, name))
            return copy.deepcopy(stored)

    def _delete_gang_object(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            stored = self.objects.get((namespace, name))
            if stored is None or (uid and stored["metadata"].get("uid") != uid):
                raise Gone(f"delete gang {namespace}/{name}: not found")
            del self.objects[(namespace, name)]
            self.writes.append(("delete", namespace, name))
