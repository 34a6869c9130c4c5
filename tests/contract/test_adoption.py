"""The minimum of the group Volcano's controller makes for a pod that names none, read from
its owner's ``scheduling.volcano.sh/group-min-member`` as Volcano reads it
(docs/decisions/065-adopted-pods-join-their-peers-groups.md)."""

from __future__ import annotations

import pytest

from troupe.adoption import GROUPING_PEERS, peer_source, volcano_minimum
from troupe.podgroups import KAI, VOLCANO


@pytest.mark.parametrize(("value", "want"), [
    (None, 1), ("2", 2), ("+3", 3), (" 4 ", 4), ("2147483647", 2147483647),
    ("0", 1), ("-2", 1), ("2147483648", 1), ("two", 1), ("", 1), ("1.5", 1), ("99999999999", 1),
], ids=lambda v: repr(v))
def test_volcanos_minimum_is_the_annotation_when_it_is_an_int32_of_at_least_one_else_one(
        value: str | None, want: int) -> None:
    assert volcano_minimum(value) == want


def test_only_volcano_and_kai_group_the_pods_that_name_no_group() -> None:
    assert GROUPING_PEERS == {"volcano": VOLCANO, "kai-scheduler": KAI}
    assert peer_source("volcano") == VOLCANO and peer_source("kai-scheduler") == KAI
    assert peer_source("scheduler-plugins-scheduler") is None and peer_source(None) is None
