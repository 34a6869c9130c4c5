"""The error a pod's invalid Troupe annotation raises, and how a value is quoted in it.

Kept apart from :mod:`troupe.contract` so that the modules the contract is built of
(:mod:`troupe.layers`, :mod:`troupe.policies`) raise the same error without importing it;
every module imports both from here.
"""

from __future__ import annotations

#: Longest value quoted whole in an error message; longer ones are cut and their length said.
MAX_QUOTED = 64


class ContractError(ValueError):
    """A pod's Troupe annotation is invalid.

    ``key`` is the annotation key, ``value`` the value found (None when missing) and the
    message says ``<key>: <why>, got <value>``, the form the webhook returns to the user.
    """

    def __init__(self, key: str, value: str | None, why: str) -> None:
        self.key, self.value, self.why = key, value, why
        got = "it is missing" if value is None else f"got {quoted(value)}"
        super().__init__(f"annotation {key}: {why}, {got}")


def quoted(value: str) -> str:
    """``value`` quoted for a message: whole up to :data:`MAX_QUOTED` characters, else its
    start and its length (``'99999...' (5000 characters)``)."""
    if len(value) <= MAX_QUOTED:
        return repr(value)
    return f"{value[:MAX_QUOTED]!r}... ({len(value)} characters)"
