"""Change notices for ``kubectl troupe -w``: watches of what its answers are made of.

One background thread per collection (pods, nodes, Gang objects) watches it from the
current ``resourceVersion`` (a list of one object gives it), the API's efficient detection
of changes ("Efficient detection of changes", Kubernetes API concepts), and calls
``notify(collection)`` for every change; the caller reads the cluster again once changes
settle. Pods are watched in every namespace (a gang's place in the queue depends on every
namespace's gangs) unless the user may not, then in the command's namespace. A watch that
ends is resumed from its last version; ``410 Gone`` lists again and notifies (changes may
have been missed); a collection the user may not watch, or that is not served (no Gang
CRD), is left out; other failures are retried after a pause.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import orjson
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from troupe import contract

#: Server-side length of one watch request, seconds (resumed from its last version after).
WATCH_SECONDS = 300
#: Pause after a failed list or watch, seconds.
RETRY_SECONDS = 2.0


def _version(list_fn: Callable[..., Any]) -> str:
    """The collection's current ``resourceVersion``, from a list of at most one object."""
    resp = list_fn(limit=1, _preload_content=False)
    meta = orjson.loads(resp.data).get("metadata") or {}
    return str(meta.get("resourceVersion") or "")


def _follow(name: str, list_fn: Callable[..., Any], notify: Callable[[str], None], stop: threading.Event,
            fallback: Callable[..., Any] | None = None) -> None:
    """Watch ``list_fn``'s collection until ``stop``; ``fallback`` is watched instead when
    the user may not watch ``list_fn``'s (403)."""
    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                version = _version(list_fn)
            # Plain dicts, nothing deserialized; the client's watch carries no annotations.
            stream = watch.Watch(return_type=object).stream(  # type: ignore[no-untyped-call]
                list_fn, resource_version=version, timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True,
                deserialize=False)
            for event in stream:
                meta = (event.get("object") or {}).get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if event.get("type") != "BOOKMARK":
                    notify(name)
                if stop.is_set():
                    return
        except ApiException as e:
            if e.status == 410:  # too old: start again from now, and read again what may have been missed
                version = None
                notify(name)
            elif e.status in (401, 403, 404) and fallback is not None:
                list_fn, fallback, version = fallback, None, None
            elif e.status in (401, 403, 404):
                return  # not allowed or not served: the other collections still tell of changes
            else:
                stop.wait(RETRY_SECONDS)
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            stop.wait(RETRY_SECONDS)


def watch_changes(api: client.ApiClient, namespace: str, notify: Callable[[str], None],
                  stop: threading.Event) -> list[threading.Thread]:
    """Start (daemon) threads watching pods (every namespace, else ``namespace``), nodes
    and Gang objects, calling ``notify`` with the collection's name for each change, until
    ``stop`` is set. Returns the threads."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    group, version, plural = contract.GANG_API
    gangs = functools.partial(custom.list_cluster_custom_object, group, version, plural)
    own_gangs = functools.partial(custom.list_namespaced_custom_object, group, version, namespace, plural)
    sources: list[tuple[str, Callable[..., Any], Callable[..., Any] | None]] = [
        ("pods", core.list_pod_for_all_namespaces, functools.partial(core.list_namespaced_pod, namespace)),
        ("nodes", core.list_node, None),
        ("gangs", gangs, own_gangs),
    ]
    threads = [threading.Thread(target=_follow, args=(name, fn, notify, stop, fallback), name=f"watch-{name}",
                                daemon=True) for name, fn, fallback in sources]
    for thread in threads:
        thread.start()
    return threads
