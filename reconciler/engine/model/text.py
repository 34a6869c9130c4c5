"""How the engine words counts in the reasons it gives (``1 node``, ``3 pods``)."""

from __future__ import annotations


def plural(count: int, word: str) -> str:
    """``count`` and ``word``, with an ``s`` unless ``count`` is 1: ``plural(2, "gang")``
    is ``"2 gangs"`` (only for the regular nouns the engine's messages use)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
