"""A stand-in for what the Kubernetes client returns with ``_preload_content=False``, for
tests of the informer and the workload caches on a scripted transport."""

from __future__ import annotations

import json


class FakeResponse:
    """What ``_preload_content=False`` returns: ``data`` for a list, ``stream()`` for a watch."""

    def __init__(self, body=None, events=()):
        self.data = json.dumps(body).encode() if body is not None else b""
        self._lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.closed = False

    def stream(self, amt=None, decode_content=False):
        yield self._lines

    def close(self):
        self.closed = True

    def release_conn(self):
        pass
