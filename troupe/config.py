"""Troupe's configuration: one YAML file read by both the webhook and the reconciler.

Keys and defaults are the user contract of ``DESIGN.md``. The gang keys keep the meaning
and defaults of the PFN gang plugin (``seeds/001``: ``gangAnnotationPrefix``,
``gangScheduleTimeoutSecondsLimit`` 100, ``gangScheduleDefaultTimeoutSeconds`` 30,
``gangScheduleTimeoutJitterSeconds`` 30); ``gangPreemptionMode`` is the Volcano proposal's
(``seeds/003``). Unknown keys are refused, so that a typo is not silently ignored.

Example (every key, with its default)::

    gangAnnotationPrefix: troupe.io/gang
    gangScheduleTimeoutSecondsLimit: 100
    gangScheduleDefaultTimeoutSeconds: 30
    gangScheduleTimeoutJitterSeconds: 30
    topologyLevels: [cloud.google.com/gce-topology-block,
                     cloud.google.com/gce-topology-subblock,
                     cloud.google.com/gce-topology-host]
    topologyFallbackLevels: [topology.gke.io/cluster, topology.gke.io/rack, topology.gke.io/host]
    volcanoTierLevels: [cloud.google.com/gce-topology-subblock,
                        cloud.google.com/gce-topology-block]
    gangPreemptionMode: "off"
    queueingStrategy: BestEffortFIFO
    headOfLineSeconds: 300
    backfillReservations: 2
    nominationMaxSeconds: 600
    reconcilerUsername: system:serviceaccount:troupe-system:troupe-reconciler
    sharedDeviceResources: [nvidia.com/gpu]
    excludedNamespaces: [kube-system]
    autoGangSettleSeconds: 5
    releaseConcurrency: 64
    kubeAPIQPS: 100
    kubeAPIBurst: 600
    adoptSchedulerNames: []
    provisioning: {}   # off; see troupe.provisioning
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import yaml

from troupe.provisioning import Provisioning
from troupe.provisioning import parse as parse_provisioning

PreemptionMode = Literal["off", "minimal", "atomic"]
PREEMPTION_MODES: tuple[PreemptionMode, ...] = ("off", "minimal", "atomic")
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO", "Backfill"]
QUEUEING_STRATEGIES: tuple[QueueingStrategy, ...] = ("BestEffortFIFO", "StrictFIFO", "Backfill")
ReleaseMode = Literal["AsCreated", "WhenComplete"]
#: How a gang of one workload is released (``troupe.io/release``, docs/decisions/034).
RELEASE_MODES: tuple[ReleaseMode, ...] = ("AsCreated", "WhenComplete")

#: A qualified name as Kubernetes validates label and annotation keys: an optional DNS
#: subdomain prefix and ``/``, then a name of at most 63 characters.
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: A DNS-1123 label: what a namespace name must be.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: A DNS-1123 subdomain: what a pod's ``spec.schedulerName`` must be.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

GKE_LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)
GKE_PRERELEASE_LEVELS = ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host")


class ConfigError(ValueError):
    """A configuration file or value is invalid. The message names the key and the value."""


@dataclass(frozen=True)
class SpreadDefault:
    """One of kube-scheduler's default topology spread constraints
    (``PodTopologySpreadArgs.defaultConstraints``, Kubernetes docs "Pod Topology Spread
    Constraints", "Cluster-level default constraints"): ``maxSkew`` pods over the domains
    of ``topologyKey``; only ``DoNotSchedule`` ones filter."""

    topology_key: str
    max_skew: int
    when_unsatisfiable: str = "DoNotSchedule"
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True)
class Config:
    """The validated configuration. Field names are the YAML keys in snake_case.

    Durations are whole seconds. ``topology_levels`` are node label keys, highest level
    first; ``topology_fallback_levels`` is the older label set a node may carry instead
    (same depth, or empty to disable), as the GKE daemon (``seeds/002``) falls back to
    ``topology.gke.io/*``.
    """

    gang_annotation_prefix: str = "troupe.io/gang"
    gang_schedule_timeout_seconds_limit: int = 100
    gang_schedule_default_timeout_seconds: int = 30
    gang_schedule_timeout_jitter_seconds: int = 30
    topology_levels: tuple[str, ...] = GKE_LEVELS
    topology_fallback_levels: tuple[str, ...] = GKE_PRERELEASE_LEVELS
    gang_preemption_mode: PreemptionMode = "off"
    #: Kueue's queueing strategies (docs/decisions/019-queue-order.md): ``BestEffortFIFO``,
    #: a gang that does not fit does not block those behind it, but once it has waited
    #: ``head_of_line_seconds`` the capacity it needs is held for it; ``StrictFIFO``, it does;
    #: ``Backfill``, the first ``backfill_reservations`` gangs that do not fit get a
    #: reservation at their earliest start at once, and gangs behind run before it only
    #: where they cannot delay it (docs/decisions/079-reservation-at-earliest-start-and-backfill.md).
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    head_of_line_seconds: int = 300
    backfill_reservations: int = 2
    #: The release mode of a gang whose members all come from one workload and that does not
    #: choose one (``troupe.io/release``): ``AsCreated`` reserves its nodes from the
    #: workload's pod template and count and releases each member as it is created;
    #: ``WhenComplete`` releases none before all exist (docs/decisions/034-release-as-created.md).
    release_mode: ReleaseMode = "AsCreated"
    #: The longest a preemptor's nomination holds nodes (seconds), victims' grace periods
    #: included: a victim's owner sets its grace period, so it cannot stretch the hold.
    nomination_max_seconds: int = 600
    reconciler_username: str = "system:serviceaccount:troupe-system:troupe-reconciler"
    shared_device_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    auto_gang_settle_seconds: int = 5
    #: How long a node may be NotReady under a running member of a ``RestartGang`` gang
    #: before that member counts as failed (seconds; kube-controller-manager's
    #: ``--node-monitor-grace-period`` is 40 s, so a node is NotReady at least that late).
    node_failure_grace_seconds: int = 60
    #: A node on which this many gang members failed or were lost within
    #: ``node_failure_window_seconds`` is avoided by new placements for
    #: ``node_avoid_seconds`` after the last of them (docs/decisions/041-failing-nodes.md).
    node_failure_threshold: int = 2
    #: ... and those failures are of members of at least this many namespaces (tenants), so
    #: one tenant's members failing on purpose cannot steer every tenant off a node.
    node_failure_namespaces: int = 2
    node_failure_window_seconds: int = 3600
    node_avoid_seconds: int = 1800
    #: Writes of one release in flight at once (docs/decisions/007-release-writes.md).
    release_concurrency: int = 64
    #: The reconciler's client-side rate limit on API requests: a token bucket refilled at
    #: ``kube_api_qps`` per second holding ``kube_api_burst`` (client-go's QPS and burst).
    kube_api_qps: float = 100.0
    kube_api_burst: int = 600
    #: The level each Volcano network tier maps to, tier 1 (the lowest) first: a Volcano
    #: PodGroup's ``networkTopology.highestTierAllowed: N`` asks for one domain of the N-th
    #: (docs/decisions/056-pod-groups.md). None: ``topologyLevels`` without the lowest,
    #: lowest first (``tier_levels``).
    volcano_tier_levels: tuple[str, ...] | None = None
    #: The ``defaultConstraints`` of kube-scheduler's PodTopologySpread, when the cluster
    #: sets them: Troupe applies their ``DoNotSchedule`` ones as kube-scheduler does.
    topology_spread_default_constraints: tuple[SpreadDefault, ...] = ()
    #: Whether the reconciler keeps a ``gangs.troupe.io`` object per gang, its status
    #: written at most once a second (docs/decisions/043-gang-objects.md).
    gang_objects: bool = True
    #: Second schedulers' names (``spec.schedulerName``) whose pods the webhook hands to
    #: kube-scheduler at creation, keeping the name in ``troupe.io/original-scheduler-name``
    #: (docs/decisions/057-adopted-scheduler-names.md): e.g. ``[volcano, kai-scheduler]``.
    adopt_scheduler_names: tuple[str, ...] = ()
    #: ProvisioningRequests for gangs that do not fit (:mod:`troupe.provisioning`,
    #: docs/decisions/080-provisioning-requests.md); None: off, the default.
    provisioning: Provisioning | None = None

    @property
    def all_levels(self) -> tuple[str, ...]:
        """Every configured level key, primary set first, then the fallback set."""
        return self.topology_levels + self.topology_fallback_levels

    def level_depth(self, key: str) -> int | None:
        """The depth (0 = highest) of a level key in either set, or None if not configured."""
        for levels in (self.topology_levels, self.topology_fallback_levels):
            if key in levels:
                return levels.index(key)
        return None

    @property
    def tier_levels(self) -> tuple[str, ...]:
        """``volcano_tier_levels``, or by default ``topologyLevels`` but the lowest (a
        host), lowest first: the GKE levels give tier 1 a subblock, tier 2 a block."""
        if self.volcano_tier_levels is not None:
            return self.volcano_tier_levels
        return tuple(reversed(self.topology_levels[:-1]))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


#: Keys whose initialism the camel-casing would lose (kube-scheduler's ``kubeAPIQPS``).
_KEYS = {"kube_api_qps": "kubeAPIQPS", "kube_api_burst": "kubeAPIBurst"}
_FIELDS = {_KEYS.get(f.name) or _camel(f.name): f for f in dataclasses.fields(Config)}


def _want_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def _want_str_list(key: str, value: Any, check: re.Pattern[str] | None = None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key}: must be a list of non-empty strings, got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{key}: must not repeat an entry, got {value!r}")
    if check is not None:
        for i, v in enumerate(value):
            if not check.fullmatch(v):
                raise ConfigError(f"{key}[{i}]: {v!r} is not a valid name")
    return tuple(value)


def _value(key: str, name: str, raw: Any) -> Any:
    """The validated value of configuration key ``key`` (field ``name``) given as ``raw``.
    Raises :class:`ConfigError` naming the key and the value."""
    if name == "gang_annotation_prefix":
        if not isinstance(raw, str) or not _QUALIFIED_NAME.fullmatch(raw + "-name") or len(raw) > 250:
            raise ConfigError(f"{key}: must be an annotation key prefix such as troupe.io/gang, got {raw!r}")
        return raw
    if name in ("gang_schedule_timeout_seconds_limit", "gang_schedule_default_timeout_seconds",
                "nomination_max_seconds", "node_failure_threshold", "backfill_reservations", "node_failure_window_seconds",
                "node_failure_namespaces"):
        return _want_int(key, raw, 1)
    if name in ("gang_schedule_timeout_jitter_seconds", "auto_gang_settle_seconds", "head_of_line_seconds",
                "node_failure_grace_seconds", "node_avoid_seconds"):
        return _want_int(key, raw, 0)
    if name in ("release_concurrency", "kube_api_burst"):
        return _want_int(key, raw, 1)
    if name == "kube_api_qps":
        if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
            raise ConfigError(f"{key}: must be a number > 0 (requests per second), got {raw!r}")
        return float(raw)
    if name in ("topology_levels", "shared_device_resources", "volcano_tier_levels"):
        return _want_str_list(key, raw, _QUALIFIED_NAME)
    if name == "topology_fallback_levels":
        return _want_str_list(key, raw, _QUALIFIED_NAME) if raw else ()
    if name == "excluded_namespaces":
        return _want_str_list(key, raw, _DNS_LABEL) if raw else ()
    if name == "adopt_scheduler_names":
        return _scheduler_names(key, raw)
    if name == "gang_preemption_mode":
        if raw not in PREEMPTION_MODES:
            # YAML 1.1 reads a bare off as False: say so, it is the usual cause.
            hint = ' (quote it: "off")' if raw is False else ""
            raise ConfigError(f"{key}: must be one of {', '.join(PREEMPTION_MODES)}, got {raw!r}{hint}")
        return cast(PreemptionMode, raw)
    if name == "release_mode":
        if raw not in RELEASE_MODES:
            raise ConfigError(f"{key}: must be one of {', '.join(RELEASE_MODES)}, got {raw!r}")
        return cast(ReleaseMode, raw)
    if name == "queueing_strategy":
        if raw not in QUEUEING_STRATEGIES:
            raise ConfigError(f"{key}: must be one of {', '.join(QUEUEING_STRATEGIES)}, got {raw!r}")
        return cast(QueueingStrategy, raw)
    if name == "topology_spread_default_constraints":
        return _spread_defaults(key, raw)
    if name == "gang_objects":
        if not isinstance(raw, bool):
            raise ConfigError(f"{key}: must be true or false, got {raw!r}")
        return raw
    if name == "provisioning":
        return parse_provisioning(key, raw, ConfigError)
    if name == "reconciler_username":
        if not isinstance(raw, str) or not raw:
            raise ConfigError(f"{key}: must be a non-empty user name, got {raw!r}")
        return raw
    raise AssertionError(f"{key}: no rule for field {name}")  # pragma: no cover


#: The name of kube-scheduler's default profile, which adopted pods are given.
DEFAULT_SCHEDULER_NAME = "default-scheduler"


def _scheduler_names(key: str, raw: Any) -> tuple[str, ...]:
    """``adoptSchedulerNames``: scheduler names as ``spec.schedulerName`` takes them (a
    DNS-1123 subdomain: Kubernetes' pod validation), none of them kube-scheduler's own."""
    if not raw:
        return ()
    names = _want_str_list(key, raw)
    for i, name in enumerate(names):
        if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            raise ConfigError(f"{key}[{i}]: must be a scheduler name as spec.schedulerName takes it (lower-case "
                              f"letters, digits, '-' and '.', at most 253 characters), got {name!r}")
        if name == DEFAULT_SCHEDULER_NAME:
            raise ConfigError(f"{key}[{i}]: {name!r} is kube-scheduler's own name, which adopted pods are given; "
                              f"list only the second schedulers' names")
    return names


_SPREAD_KEYS = {"topologyKey", "maxSkew", "whenUnsatisfiable", "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"}


def _spread_defaults(key: str, raw: Any) -> tuple[SpreadDefault, ...]:
    """``topologySpreadDefaultConstraints``: a list of kube-scheduler's default constraints
    (no ``labelSelector``, as kube-scheduler refuses one there)."""
    if not isinstance(raw, list):
        raise ConfigError(f"{key}: must be a list of constraints, got {raw!r}")
    out = []
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - _SPREAD_KEYS:
            raise ConfigError(f"{where}: must be a mapping of {', '.join(sorted(_SPREAD_KEYS))}, got {entry!r}")
        topology_key = entry.get("topologyKey")
        if not isinstance(topology_key, str) or not _QUALIFIED_NAME.fullmatch(topology_key):
            raise ConfigError(f"{where}.topologyKey: must be a label key, got {topology_key!r}")
        choices = {"whenUnsatisfiable": ("DoNotSchedule", "ScheduleAnyway"), "nodeAffinityPolicy": ("Honor", "Ignore"),
                   "nodeTaintsPolicy": ("Honor", "Ignore")}
        for field, allowed in choices.items():
            if field in entry and entry[field] not in allowed:
                raise ConfigError(f"{where}.{field}: must be one of {', '.join(allowed)}, got {entry[field]!r}")
        out.append(SpreadDefault(topology_key, _want_int(f"{where}.maxSkew", entry.get("maxSkew"), 1),
                                 entry.get("whenUnsatisfiable", "DoNotSchedule"),
                                 _want_int(f"{where}.minDomains", entry.get("minDomains", 1), 1),
                                 entry.get("nodeAffinityPolicy", "Honor"), entry.get("nodeTaintsPolicy", "Ignore")))
    return tuple(out)


def _check_together(config: Config) -> None:
    """The rules between keys (fallback levels beside the levels, the default timeout within
    the limit). Raises :class:`ConfigError` naming the key."""
    if not config.topology_levels:
        raise ConfigError("topologyLevels: must name at least one level")
    fallback = config.topology_fallback_levels
    if fallback and len(fallback) != len(config.topology_levels):
        raise ConfigError(
            f"topologyFallbackLevels: must have as many levels as topologyLevels "
            f"({len(config.topology_levels)}) or be empty, got {list(fallback)!r}"
        )
    if set(fallback) & set(config.topology_levels):
        raise ConfigError(f"topologyFallbackLevels: must not repeat a key of topologyLevels, got {list(fallback)!r}")
    for i, level in enumerate(config.volcano_tier_levels or ()):
        if config.level_depth(level) is None:
            raise ConfigError(f"volcanoTierLevels[{i}]: {level!r} is not a configured level "
                              f"({', '.join(config.all_levels)})")
    if config.gang_schedule_default_timeout_seconds > config.gang_schedule_timeout_seconds_limit:
        raise ConfigError(
            f"gangScheduleDefaultTimeoutSeconds: {config.gang_schedule_default_timeout_seconds} exceeds "
            f"gangScheduleTimeoutSecondsLimit ({config.gang_schedule_timeout_seconds_limit})"
        )


def from_mapping(data: Mapping[str, Any]) -> Config:
    """Validate a parsed configuration mapping (camelCase keys) into a :class:`Config`.

    Raises :class:`ConfigError` naming the first bad key and its value; unknown keys are
    errors too.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"configuration must be a mapping of keys to values, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown configuration key (known: {', '.join(sorted(_FIELDS))})")
    values = {_FIELDS[key].name: _value(key, _FIELDS[key].name, raw) for key, raw in data.items()}
    config = Config(**values)
    _check_together(config)
    return config


def yaml_error(error: Any) -> str:
    """A PyYAML error (``yaml.YAMLError``) as one line: ``line 3, column 7: expected ...``
    (1-based, where the parser noticed it), or its first line when it has no place."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or (str(error).splitlines() or [type(error).__name__])[0]
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def load_config(path: str | None) -> Config:
    """Read and validate the YAML configuration file at ``path``; defaults when ``path`` is None.

    An empty file means all defaults. Raises :class:`ConfigError` naming the file and the
    key (``FILE: key: message``) for unreadable files, invalid YAML and invalid values.
    """
    if path is None:
        return Config()
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML at {yaml_error(e)}") from e
    try:
        return from_mapping(data or {})
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
