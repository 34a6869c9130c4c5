"""What one member's annotations ask of its gang, parsed once per distinct set of them
(:class:`MemberKeys`, :func:`member_keys`): the gang it names, its gang annotations
(seeds/001), its topology request and its failure policy. The members of a gang carry the
same annotations, so one parse serves them all, and serves both the gang's key (the
sources of :mod:`reconciler.engine.model.declared`) and its sizing
(docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md); the memo is bounded by
what it holds (docs/decisions/063-memos-held-by-their-users.md). The parsers are
:mod:`troupe.contract`'s, the webhook's own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import lru_cache

import troupe.contract as contract
from reconciler.engine.model.memo import ChargedMemo
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config
from troupe.errors import ContractError
from troupe.policies import REPLACE_MEMBER, parse_failure_policy


@lru_cache(maxsize=16)
def gang_keys(prefix: str) -> contract.GangKeys:
    """The gang annotation keys of ``prefix`` (``gangAnnotationPrefix``: ``troupe.io/gang``
    gives ``troupe.io/gang-name``, ``-size``, ``-schedule-timeout-seconds``, ``-min-size``;
    ``seeds/001``), made once per prefix: every pod of every snapshot asks."""
    return contract.GangKeys.for_prefix(prefix)


@dataclass(frozen=True)
class MemberKeys:
    """What one member's annotations ask of its gang, parsed once: ``spec``, its gang
    annotations (:class:`troupe.contract.GangSpec`; None when it carries none), or
    ``spec_error``, why they cannot be read; ``topology``, its topology request (level,
    slices, placement, exclusive level: :class:`troupe.contract.TopologyRequest`) and
    ``policy``, its failure policy, or ``request_error``, why one of those cannot be read
    (then both are the defaults, or the topology alone when only the policy is wrong).
    Error texts are :class:`troupe.errors.ContractError` messages, naming the key and
    the value. The members of a gang carry the same annotations, so one parse serves
    them all (:func:`member_keys`); placement, layers and preemption read the gang's
    :attr:`~reconciler.engine.gangs.gang.Gang.topology`, never the annotations again.
    ``named``: whether ``<prefix>-name`` (absent: ``""``) is a gang name the contract
    accepts, the value alone checked (a gang whose size is wrong is still that gang, held):
    the gang's key is ``<namespace>/<name>`` when it is, the pod's own gang of one when not."""

    spec: contract.GangSpec | None = None
    spec_error: str = ""
    topology: contract.TopologyRequest = field(default_factory=contract.TopologyRequest)
    policy: str = REPLACE_MEMBER
    request_error: str = ""
    named: bool = False


_Keys = tuple[tuple[tuple[str, str], ...], str, Config]
#: What an entry of the memo of :func:`member_keys` holds beside its annotations' and
#: namespace's strings: the key's tuples, the entry and the parsed :class:`MemberKeys`, whose
#: messages quote at most :data:`~troupe.errors.MAX_QUOTED` characters of a value (measured:
#: 0.9 KB, 1.8 KB for a member whose every key is wrong).
KEYS_ENTRY_BYTES = 2048
#: What the memo of :func:`member_keys` holds at most, in bytes (about 3,500 gangs' members'
#: keys of the usual size; docs/decisions/063-memos-held-by-their-users.md). Bounded by count,
#: it held 4,096 times whatever one member's annotations were (up to 256 KiB each).
KEYS_MEMO_BYTES = 8 * 2**20


def _charged(key: _Keys, _: MemberKeys) -> int:
    annotations, namespace, _config = key  # one configuration object serves every entry
    return KEYS_ENTRY_BYTES + sys.getsizeof(namespace) + sum(sys.getsizeof(k) + sys.getsizeof(v)
                                                             for k, v in annotations)


_keys_memo: ChargedMemo[_Keys, MemberKeys] = ChargedMemo(KEYS_MEMO_BYTES, _charged)


def _parse_keys(annotations: tuple[tuple[str, str], ...], namespace: str, config: Config) -> MemberKeys:
    key = (annotations, namespace, config)
    found = _keys_memo.get(key)
    return found if found is not None else _keys_memo.put(key, _read_keys(annotations, namespace, config))


def _read_keys(annotations: tuple[tuple[str, str], ...], namespace: str, config: Config) -> MemberKeys:
    a = dict(annotations)
    spec, spec_error = None, ""
    try:
        spec = contract.parse_gang_annotations(a, namespace, config)
    except ContractError as e:
        spec_error = str(e)
    topology, policy, request_error = contract.TopologyRequest(), REPLACE_MEMBER, ""
    try:
        topology = contract.parse_topology_annotations(a, config)
        policy = parse_failure_policy(a)
    except ContractError as e:
        request_error = str(e)
    keys = gang_keys(config.gang_annotation_prefix)
    try:
        contract.parse_gang_annotations({keys.name: a.get(keys.name, ""), keys.size: "1"}, namespace, config)
        named = True
    except ContractError:
        named = False
    return MemberKeys(spec, spec_error, topology, policy, request_error, named)


def member_keys(pod: PodInfo, config: Config) -> MemberKeys:
    """:class:`MemberKeys` of ``pod`` under ``config``: parsed once per distinct set of
    annotations, namespace and configuration (a gang's members share one parse), the most
    recent parses remembered within :data:`KEYS_MEMO_BYTES`."""
    return _parse_keys(tuple(sorted(pod.gang_annotations.items())), pod.namespace, config)
