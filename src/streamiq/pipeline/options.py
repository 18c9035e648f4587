"""Options of the ``streamiq-kafka`` source: the names and rules of Spark's ``kafka`` format.

Everything here is plain data (picklable, JSON-serialisable) and runs on the driver at
``load()`` time, so a bad option fails there with a message naming the option.

Offsets use Spark's JSON form ``{"topic": {"0": 23, "1": -2}}`` where ``-2`` means
earliest and ``-1`` latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EARLIEST",
    "FORBIDDEN_KAFKA",
    "LATEST",
    "TP",
    "KafkaOptions",
    "OffsetJson",
    "OffsetSpec",
    "Offsets",
    "offsets_from_json",
    "offsets_to_json",
    "parse_options",
]

EARLIEST = -2
LATEST = -1

TP = tuple[str, int]
#: ``{(topic, partition): offset}``; the JSON form is ``{topic: {"partition": offset}}``.
Offsets = dict[TP, int]
#: the JSON form, as Spark checkpoints it and hands it back: ``{topic: {"partition": offset}}``
OffsetJson = dict[str, dict[str, int]]
#: ``"earliest"``, ``"latest"`` or explicit per-partition offsets (may hold -2 / -1).
OffsetSpec = str | Offsets

# Source options understood (lower-case, as Spark compares option names case-insensitively).
_KNOWN = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "maxoffsetspertrigger", "failondataloss", "includeheaders", "minpartitions",
    "kafkaconsumer.polltimeoutms", "pausewhenexists", "emptyfirstbatch",
}
# Built-in kafka-format options this source does not implement: fail loudly, not silently.
_UNSUPPORTED = {
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestampstrategy", "minoffsetspertrigger",
    "maxtriggerdelay", "maxrecordsperpartition", "groupidprefix",
    "fetchoffset.numretries", "fetchoffset.retryintervalms",
}
# Spark rejects these kafka.* settings for its source because it manages them itself.
FORBIDDEN_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source does not commit offsets; Spark checkpoints them",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "not supported",
}


def offsets_to_json(offsets: Mapping[TP, int]) -> str:
    """``{(t, p): o}`` -> Spark's offset JSON (partitions sorted, keys as strings)."""
    out: OffsetJson = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return json.dumps(out, sort_keys=False)


def offsets_from_json(data: str | Mapping[str, Any], option: str = "offsets") -> Offsets:
    """Spark's offset JSON (string or parsed dict) -> ``{(t, p): o}``; errors name ``option``."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, RecursionError) as exc:  # too deeply nested: not JSON
            raise ValueError(f"option '{option}': not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"option '{option}': expected a JSON object "
                         '{"topic": {"partition": offset}}, got ' + json.dumps(data))
    out: Offsets = {}
    for t, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"option '{option}': topic {t!r} must map to an object "
                             "{\"partition\": offset}")
        for p, o in parts.items():
            try:
                pi = int(p)
            except (TypeError, ValueError):
                raise ValueError(f"option '{option}': partition {p!r} of topic {t!r} is not "
                                 "an integer") from None
            if isinstance(o, bool) or not isinstance(o, int) or o < EARLIEST or pi < 0:
                raise ValueError(f"option '{option}': offset {o!r} for {t}-{p} must be an "
                                 "integer >= 0, -2 (earliest) or -1 (latest)")
            out[(str(t), pi)] = o
    return out


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise ValueError(f"option '{name}': expected true or false, got {raw!r}")


def _offset_spec(opts: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]
                 ) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = str(raw).strip()
    if v.lower() in ("earliest", "latest"):
        if v.lower() not in allowed:
            raise ValueError(f"option '{name}': {v.lower()!r} is not allowed here "
                             f"(use {' or '.join(allowed)} or per-partition JSON)")
        return v.lower()
    if not v.startswith("{"):
        raise ValueError(f"option '{name}': expected {' or '.join(repr(a) for a in allowed)} or "
                         f'per-partition JSON {{"topic": {{"0": offset}}}}, got {v!r}')
    spec = offsets_from_json(v, name)
    bad = EARLIEST if "earliest" not in allowed else LATEST if "latest" not in allowed else None
    if bad is not None and bad in spec.values():
        raise ValueError(f"option '{name}': offset {bad} "
                         f"({'earliest' if bad == EARLIEST else 'latest'}) is not allowed here")
    return spec


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    n = int(raw) if raw.strip().isdigit() else 0
    if n <= 0:
        raise ValueError(f"option '{name}' must be a positive integer, got {raw!r}")
    return n


@dataclass(frozen=True)
class KafkaOptions:
    """Validated source options. ``kafka`` holds the librdkafka settings (``kafka.`` removed)."""

    kafka: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TP, ...] = ()
    starting: OffsetSpec = "latest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    #: a path on the driver: while a file exists there, a streaming read offers no new
    #: data, so a query can be stopped between micro-batches (not in one)
    pause_when_exists: str | None = None
    #: a new query (nothing committed yet) runs its first micro-batch at once, empty if
    #: there is nothing to read, instead of waiting for the first record: its one-time
    #: costs (state stores, plan, sink) are paid before a user writes
    empty_first_batch: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        """True when ``topic`` is one this source reads (subscribe / pattern / assign)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)


def _kafka_params(options: Mapping[str, Any]) -> dict[str, str]:
    """The ``kafka.*`` options, prefix dropped; the ones Spark's format forbids refused."""
    kafka: dict[str, str] = {}
    for k, v in options.items():
        if str(k).lower().startswith("kafka.") and str(k).lower() != "kafka.":
            name = str(k)[len("kafka."):]
            if name.lower() in FORBIDDEN_KAFKA:
                raise ValueError(f"option 'kafka.{name}' is not supported: "
                                 f"{FORBIDDEN_KAFKA[name.lower()]}")
            kafka[name] = str(v)
    if "bootstrap.servers" not in kafka:
        raise ValueError("option 'kafka.bootstrap.servers' must be specified for configuring "
                         "Kafka consumer")
    return kafka


def _check_names(opts: Mapping[str, str]) -> None:
    for k in opts:
        if k.startswith("kafka."):
            continue
        if k in _UNSUPPORTED:
            raise ValueError(f"option '{k}' of Spark's kafka source is not supported by "
                             "streamiq-kafka")
        if k not in _KNOWN and k != "path":
            raise ValueError(f"unknown option '{k}' for streamiq-kafka (known: "
                             f"{', '.join(sorted(_KNOWN))}, kafka.*)")


def _pattern(raw: str) -> str:
    pattern = raw.strip()
    if not pattern:
        raise ValueError("option 'subscribePattern': pattern to subscribe is empty")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:  # nesting; a{4294967296}
        raise ValueError(f"option 'subscribePattern': invalid regex: {exc}") from None
    return pattern


def _assign(raw: str) -> tuple[TP, ...]:
    try:
        spec = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"option 'assign': not valid JSON: {exc}") from None
    if (not isinstance(spec, dict) or not spec
            or not all(isinstance(v, list) for v in spec.values())):
        raise ValueError('option \'assign\': expected {"topic": [partitions...]}, got ' + raw)
    tps: list[TP] = []
    for t, parts in spec.items():
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise ValueError(f"option 'assign': partition {p!r} of {t!r} is not an "
                                 "integer >= 0")
            tps.append((str(t), p))
    return tuple(sorted(set(tps)))


def _strategy(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, tuple[TP, ...]]:
    """(subscribe, subscribePattern, assign): exactly one of them given."""
    strategies = [s for s in ("subscribe", "subscribePattern", "assign") if s.lower() in opts]
    if len(strategies) != 1:
        raise ValueError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                         f"must be specified, got {strategies or 'none'}")
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise ValueError("option 'subscribe': no topics to subscribe to")
        return subscribe, None, ()
    if "subscribepattern" in opts:
        return (), _pattern(opts["subscribepattern"]), ()
    return (), None, _assign(opts["assign"])


def _offsets(opts: Mapping[str, str], streaming: bool, assign: tuple[TP, ...]
             ) -> tuple[OffsetSpec, OffsetSpec]:
    """(startingOffsets, endingOffsets) as the query kind allows them."""
    if streaming:
        if "endingoffsets" in opts:
            raise ValueError("option 'endingOffsets' is not allowed in streaming queries")
        starting = _offset_spec(opts, "startingOffsets", "latest", ("earliest", "latest"))
        ending: OffsetSpec = "latest"
    else:
        if "maxoffsetspertrigger" in opts:
            raise ValueError("option 'maxOffsetsPerTrigger' is not allowed in batch queries")
        starting = _offset_spec(opts, "startingOffsets", "earliest", ("earliest",))
        ending = _offset_spec(opts, "endingOffsets", "latest", ("latest",))
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if assign and isinstance(spec, dict):
            missing = sorted(set(spec) - set(assign))
            if missing:
                raise ValueError(f"option '{name}': {missing} are not in 'assign'")
    return starting, ending


def parse_options(options: Mapping[str, Any], streaming: bool | None) -> KafkaOptions:
    """Validate source options as Spark's kafka format does (``streaming=None``: either)."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    kafka = _kafka_params(options)
    _check_names(opts)
    subscribe, pattern, assign = _strategy(opts)
    if streaming is None:  # at load(): batch or stream is not known yet
        streaming = "endingoffsets" not in opts
    starting, ending = _offsets(opts, streaming, assign)
    poll = opts.get("kafkaconsumer.polltimeoutms", "120000")
    if not poll.isdigit() or int(poll) <= 0:
        raise ValueError(f"option 'kafkaConsumer.pollTimeoutMs' must be a positive integer, "
                         f"got {poll!r}")
    return KafkaOptions(
        kafka=kafka, subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending,
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
        min_partitions=_positive(opts, "minPartitions"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        poll_timeout_ms=int(poll),
        pause_when_exists=opts.get("pausewhenexists") or None,
        empty_first_batch=_bool(opts, "emptyFirstBatch", False),
    )
