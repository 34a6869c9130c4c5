"""When ``kubectl troupe -w`` answers again: after each batch of changes, as ``kubectl get -w``.

On a live cluster the changes are the watch events of its pods, nodes and Gang objects
(:func:`reconciler.kube.watching.watch_changes`); in a snapshot file, a new modification time,
size or inode of the file (checked every :data:`FILE_POLL_SECONDS`; a snapshot read from
stdin never changes). Changes are debounced: after the first one, the batch takes every
change until ``--watch-interval`` seconds have passed since the last answer, so that a burst
(a gang of 256 pods created) costs one read of the cluster, not 256 (docs/decisions/052).
Changes the watched collections do not show (a Job's, a PodDisruptionBudget's, time passing)
are in the next answer a pod, node or Gang object change brings.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: Seconds between two looks at a snapshot file's modification time.
FILE_POLL_SECONDS = 0.1


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def file_changes(path: str, interval: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Yield once per batch of changes of the file ``path`` (``-``: stdin, never) since
    this call, at most once per ``interval`` seconds."""
    seen, last = _stamp(path), clock()  # now, not at the first next(): a change meanwhile counts

    def batches() -> Iterator[None]:
        nonlocal seen, last
        while True:
            sleep(FILE_POLL_SECONDS if path != "-" else 3600)
            if path != "-" and _stamp(path) != seen:
                sleep(max(0.0, last + interval - clock()))
                seen, last = _stamp(path), clock()
                yield

    return batches()


def debounced(notices: queue.Queue[str], interval: float, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Yield once per batch of ``notices``: block for the first, take every other that
    comes until ``interval`` seconds have passed since the last batch, then yield."""
    last = clock()
    while True:
        notices.get()
        sleep(max(0.0, last + interval - clock()))
        while True:
            try:
                notices.get_nowait()
            except queue.Empty:
                break
        last = clock()
        yield


def changes(args: argparse.Namespace, client: Callable[[argparse.Namespace], tuple[Any, str]]) -> Iterator[None]:
    """The batches of changes ``-w`` answers again after, from this call on: the snapshot
    file's (``--snapshot``), else the cluster's watch events, with the API client
    ``client(args)`` gives (a second one: its watches hold their connections open; they
    are daemon threads, ended with the command). Raises ``ValueError`` as ``client`` does."""
    if args.snapshot:
        return file_changes(args.snapshot, args.watch_interval)
    from reconciler.kube.watching import watch_changes

    api, namespace = client(args)
    notices: queue.Queue[str] = queue.Queue()
    watch_changes(api, getattr(args, "namespace", None) or namespace, notices.put, threading.Event())
    return debounced(notices, args.watch_interval)
