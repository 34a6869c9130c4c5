"""The layers of a gang's topology request: slices, placement and exclusive domains.

A gang may ask, next to its ``troupe.io/topology-required-level`` or ``-preferred-level``
(:mod:`troupe.contract`; docs/contract.md, "Slices, balanced placement, exclusive domains"):

- ``troupe.io/topology-slice-size: "32,4"`` with
  ``troupe.io/topology-slice-required-level: "<subblock key>,kubernetes.io/hostname"``:
  up to :data:`MAX_LAYERS` layers, outermost first. In layer ``i`` of size ``S``, ranks
  ``[k*S, (k+1)*S)`` are placed inside one domain of that layer's level, for every ``k``
  (Kueue's ``podset-slice-size`` with ``podset-slice-required-topology``, nested as its
  multi-layer slices are). Each size divides the one before it and the gang size; each
  level is at or below the one before it and at or below the gang's required level.
- ``troupe.io/topology-placement: Balanced`` (default ``Compact``): a gang that spans
  several domains of a level spreads its members (or slices) across the fewest domains
  that hold it as evenly as their room allows (Kueue's balanced placement).
- ``troupe.io/topology-exclusive-level: <level>``: the gang's domains of that level take
  no other Troupe gang (JobSet's ``exclusive-topology``).

Plain values only: no Kubernetes client, no I/O. Errors are
:class:`~troupe.errors.ContractError` naming the key and quoting the value.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from troupe.config import Config
from troupe.errors import ContractError

#: The node level (one node), accepted wherever a level is.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The gang's level request (:mod:`troupe.contract`, DESIGN.md "Topology"): defined here so
#: that the modules the contract is built of (:mod:`troupe.kueue`) name them too.
TOPOLOGY_REQUIRED_LEVEL = "troupe.io/topology-required-level"
TOPOLOGY_PREFERRED_LEVEL = "troupe.io/topology-preferred-level"
TOPOLOGY_SLICE_SIZE = "troupe.io/topology-slice-size"
TOPOLOGY_SLICE_REQUIRED_LEVEL = "troupe.io/topology-slice-required-level"
TOPOLOGY_PLACEMENT = "troupe.io/topology-placement"
TOPOLOGY_EXCLUSIVE_LEVEL = "troupe.io/topology-exclusive-level"
#: At most this many slice layers (Kueue's limit too).
MAX_LAYERS = 3
COMPACT = "Compact"
BALANCED = "Balanced"
PLACEMENTS = (COMPACT, BALANCED)


@dataclass(frozen=True)
class SliceLayer:
    """One slice layer: ``size`` members (ranks ``[k*size, (k+1)*size)``) inside one domain
    of ``level`` (a level's node label key, or ``kubernetes.io/hostname``)."""

    size: int
    level: str

    def __str__(self) -> str:
        """``slices of 8 at <level>``, the words reasons use."""
        return f"slices of {self.size} at {self.level}"


def _depth(config: Config, level: str) -> int | None:
    """The depth of a level key (0 = highest), the node level below every configured one."""
    if level == HOSTNAME_LABEL:
        return len(config.topology_levels)
    return config.level_depth(level)


def _listed(raw: Any, key: str) -> list[str]:
    """The comma-separated entries of ``raw``: 1 to :data:`MAX_LAYERS`, none empty."""
    if not isinstance(raw, str):
        raise ContractError(key, str(raw), "must be a string")
    parts = [part.strip() for part in raw.split(",")]
    if not 1 <= len(parts) <= MAX_LAYERS or not all(parts):
        raise ContractError(key, raw, f"must list 1 to {MAX_LAYERS} layers, outermost first, separated by ','")
    return parts


def _sizes(raw: Any) -> list[int]:
    """The slice sizes: positive decimals of at most 9 digits, each dividing the one before."""
    sizes = []
    for part in _listed(raw, TOPOLOGY_SLICE_SIZE):
        if not (part.isascii() and part.isdigit() and len(part) <= 9 and int(part) >= 1):
            raise ContractError(TOPOLOGY_SLICE_SIZE, str(raw), "each size must be an integer >= 1 of at most 9 digits")
        sizes.append(int(part))
    for outer, inner in itertools.pairwise(sizes):
        if inner >= outer or outer % inner:
            raise ContractError(TOPOLOGY_SLICE_SIZE, str(raw),
                                f"each size must be smaller than the one before it and divide it ({inner} and {outer})")
    return sizes


def parse_slices(a: Mapping[str, Any], config: Config, required: str | None) -> tuple[SliceLayer, ...]:
    """The slice layers of annotations ``a``, outermost first (module docstring); ``()``
    without the slice keys. ``required``: the gang's required level (already checked), or
    None. Raises :class:`ContractError` naming the key and the value."""
    raw_sizes, raw_levels = a.get(TOPOLOGY_SLICE_SIZE), a.get(TOPOLOGY_SLICE_REQUIRED_LEVEL)
    if raw_sizes is None and raw_levels is None:
        return ()
    if raw_levels is None:
        raise ContractError(TOPOLOGY_SLICE_REQUIRED_LEVEL, None, f"is required with {TOPOLOGY_SLICE_SIZE}")
    if raw_sizes is None:
        raise ContractError(TOPOLOGY_SLICE_SIZE, None, f"is required with {TOPOLOGY_SLICE_REQUIRED_LEVEL}")
    sizes = _sizes(raw_sizes)
    levels = _listed(raw_levels, TOPOLOGY_SLICE_REQUIRED_LEVEL)
    if len(levels) != len(sizes):
        raise ContractError(TOPOLOGY_SLICE_REQUIRED_LEVEL, str(raw_levels),
                            f"must name one level per size of {TOPOLOGY_SLICE_SIZE} ({len(sizes)})")
    known = ", ".join((*config.all_levels, HOSTNAME_LABEL))
    depths = []
    for level in levels:
        depth = _depth(config, level)
        if depth is None:
            raise ContractError(TOPOLOGY_SLICE_REQUIRED_LEVEL, str(raw_levels),
                                f"{level!r} is not a configured level ({known})")
        depths.append(depth)
    if any(inner < outer for outer, inner in itertools.pairwise(depths)):
        raise ContractError(TOPOLOGY_SLICE_REQUIRED_LEVEL, str(raw_levels),
                            "each level must be at or below the one before it (outermost first)")
    floor = _depth(config, required) if required is not None else None
    if floor is not None and depths[0] < floor:
        raise ContractError(TOPOLOGY_SLICE_REQUIRED_LEVEL, str(raw_levels),
                            f"the outermost level must be at or below the gang's troupe.io/topology-required-level {required!r}")
    return tuple(SliceLayer(size, level) for size, level in zip(sizes, levels, strict=True))


def parse_layers(a: Mapping[str, Any], config: Config,
                 required: str | None) -> tuple[tuple[SliceLayer, ...], str, str | None]:
    """``(slices, placement, exclusive level)`` of annotations ``a``: :func:`parse_slices`,
    ``troupe.io/topology-placement`` (:data:`COMPACT` when absent) and
    ``troupe.io/topology-exclusive-level`` (None when absent). Raises
    :class:`ContractError` naming the key and the value."""
    slices = parse_slices(a, config, required)
    placement = a.get(TOPOLOGY_PLACEMENT, COMPACT)
    if placement not in PLACEMENTS:
        raise ContractError(TOPOLOGY_PLACEMENT, str(placement), f"must be one of {', '.join(PLACEMENTS)}")
    exclusive = a.get(TOPOLOGY_EXCLUSIVE_LEVEL)
    if exclusive is not None and (not isinstance(exclusive, str) or _depth(config, exclusive) is None):
        raise ContractError(TOPOLOGY_EXCLUSIVE_LEVEL, str(exclusive),
                            f"must name a configured level ({', '.join((*config.all_levels, HOSTNAME_LABEL))})")
    return slices, str(placement), exclusive


def check_gang_size(slices: tuple[SliceLayer, ...], size: int, raw_sizes: str) -> None:
    """Refuse a gang ``size`` that the outermost slice size does not divide: raises
    :class:`ContractError` on ``troupe.io/topology-slice-size`` (value ``raw_sizes``)."""
    if slices and size % slices[0].size:
        raise ContractError(TOPOLOGY_SLICE_SIZE, raw_sizes,
                            f"the gang size {size} must be a multiple of the outermost slice size {slices[0].size}")


def check_min_size(slices: tuple[SliceLayer, ...], minimum: int, key: str) -> None:
    """Refuse a gang's minimum size ``minimum`` (annotation ``key``, ``<prefix>-min-size``)
    that the outermost slice size does not divide: the first release holds whole slices
    (docs/decisions/038-minimum-size.md). Raises :class:`ContractError` on ``key``."""
    if slices and minimum % slices[0].size:
        raise ContractError(key, str(minimum),
                            f"the minimum size must be a multiple of the outermost slice size {slices[0].size}")
