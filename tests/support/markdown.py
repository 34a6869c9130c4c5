"""Reading the project's Markdown documents in tests that check them against the code."""

from __future__ import annotations


def section(text: str, heading: str, until: str = "#") -> str:
    """The text under the Markdown ``heading`` (its whole line, e.g. ``"## Install"``) up to
    the next line starting with ``until`` outside a fenced code block: ``"#"`` (the default)
    stops at a heading of any level, ``"## "`` keeps the section's subsections. A ``#`` line
    inside a fence is a shell comment, not a heading. Raises ``AssertionError`` when there is
    no such heading."""
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    body: list[str] = []
    fenced = False
    for line in lines[lines.index(heading) + 1:]:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif line.startswith(until) and not fenced:
            break
        body.append(line)
    return "\n".join(body)
