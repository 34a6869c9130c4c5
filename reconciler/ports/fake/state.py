"""An in-memory :class:`~reconciler.ports.state.StateStore` (:class:`FakeStateStore`),
with the API server's rules for a ConfigMap's data."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.ports.base import UNFENCED, Fence, WriteError
from reconciler.ports.state import StateStore

#: A ConfigMap's data key: kube-apiserver's ``IsConfigMapKey`` (at most 253 characters of
#: these, and not ``.``, ``..`` nor starting with ``..``).
CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
#: The most bytes of values a ConfigMap's data holds (``core.MaxSecretSize``, 1 MiB).
CONFIG_MAP_MAX_BYTES = 1024 * 1024


@dataclass
class FakeStateStore(StateStore):
    """In-memory :class:`StateStore` over the state ConfigMap's ``data``. A write whose key is
    not a ConfigMap key, or that would leave more than :data:`CONFIG_MAP_MAX_BYTES` bytes of
    values, is refused with :class:`~..base.WriteError` (the API server's 422) and changes nothing.
    Thread-safe."""

    fence: Fence = UNFENCED
    data: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: How many times the ConfigMap was read.
    reads: int = 0

    def _read_state(self) -> dict[str, str]:
        with self._lock:
            self.reads += 1
            return dict(self.data)

    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        bad = [k for k in changes if not CONFIG_MAP_KEY.fullmatch(k) or k in (".", "..") or k.startswith("..")]
        if bad:
            raise WriteError(f"patch configmap: data[{bad[0]}]: Invalid value: a valid config key must consist of "
                             "alphanumeric characters, '-', '_' or '.'")
        with self._lock:
            data = {k: v for k, v in {**self.data, **changes}.items() if v is not None}
            size = sum(len(v.encode()) for v in data.values())
            if size > CONFIG_MAP_MAX_BYTES:
                raise WriteError(f"patch configmap: data: Too long: must have at most {CONFIG_MAP_MAX_BYTES} bytes")
            self.data.clear()
            self.data.update(data)
