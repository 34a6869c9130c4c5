"""``NodeName``: a pod that names its node (``spec.nodeName``) fits only there
(``pkg/scheduler/framework/plugins/nodename``). The API refuses ``spec.nodeName`` together
with scheduling gates, so a gated member never has one; pods the gang filters count may.
"""

from __future__ import annotations

from reconciler.engine.filters.status import Code, Plugin, Registered, Status

NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"

PLUGIN = Plugin("NodeName")
MISMATCH = Status(Code.UNRESOLVABLE, PLUGIN, (NODE_NAME_MISMATCH,))


def check(wanted: str, node: str) -> Status | None:
    """None when the pod names no node (``wanted`` ``""``) or names ``node``."""
    return MISMATCH if wanted and wanted != node else None


REGISTERED = Registered(PLUGIN, (NODE_NAME_MISMATCH,), "pkg/scheduler/framework/plugins/nodename")
