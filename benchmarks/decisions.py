"""The decisions a benchmark made, as one digest held against the one recorded.

The placement, preemption and simulator benchmarks feed every plan they compute (members'
nodes, costs, domains, victims, phases and reasons) to a :class:`Decisions`, which prints
one line at the end::

    decisions placement (seed 7): sha256 3f2a9c0e41b7, 9 plans, the same as recorded

``benchmarks/decisions.json`` keeps the digest per benchmark and arguments. A change that
must not change a plan (a restructuring, a speed-up) is checked by running the benchmark:
``CHANGED`` means some plan differs, and the benchmark fails. ``--record-decisions`` writes
the digest of this run as the new record, for a change that is meant to change plans.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("decisions.json")


class Decisions:
    """The plans of one benchmark run (``name``: the benchmark and the arguments that choose
    its instances, ``"placement (seed 7)"``), digested in the order they are added."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self._hash = hashlib.sha256()

    def add(self, label: str, value: Any) -> None:
        """One plan: ``value`` is plain data (dicts, lists, strings, numbers), written as
        canonical JSON (sorted keys) under ``label``."""
        self.count += 1
        self._hash.update(json.dumps([label, value], sort_keys=True, separators=(",", ":"), default=str).encode())
        self._hash.update(b"\n")

    @property
    def digest(self) -> str:
        """The first 12 hex digits of the sha256 of every plan added."""
        return self._hash.hexdigest()[:12]

    def report(self, record: bool = False) -> bool:
        """Print the digest and how it compares with the recorded one; ``record``: write it
        as the record instead. False when it differs from a record (a plan changed)."""
        recorded = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        before = recorded.get(self.name)
        if record:
            recorded[self.name] = self.digest
            RECORD.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
            verdict = "recorded"
        elif before is None:
            verdict = "no record (--record-decisions writes one)"
        elif before == self.digest:
            verdict = "the same as recorded"
        else:
            verdict = f"CHANGED (recorded: {before})"
        print(f"decisions {self.name}: sha256 {self.digest}, {self.count} plans, {verdict}")
        return before is None or before == self.digest or record


def placement(result: Any) -> dict[str, Any]:
    """What a :class:`~reconciler.engine.placement.place.PlacementResult` decides, as plain data:
    each member's node and rank, the code, reason, cost, domain, fit, search method, slices
    and balance."""
    balance = result.balance
    return {
        "assignments": [[str(a.pod_key), a.node, a.rank] for a in result.assignments],
        "code": str(result.code), "reason": result.reason, "cost": result.cost,
        "domain": None if result.domain is None else str(result.domain), "fits": result.fits,
        "method": result.method,
        "slices": [[s.layer, s.size, s.index, str(s.domain)] for s in result.slices],
        "balance": None if balance is None else [balance.depth, balance.domains, balance.largest, balance.smallest],
    }
