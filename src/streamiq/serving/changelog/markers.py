"""Changelog markers read by the nodes, and the claims they may make.

A marker (header ``streamiq-marker``) names the input offsets its micro-batch reflects:
``{"batch_id": n, "offsets": {topic: {partition: next_offset}}}``; a node's position,
and so every read-your-writes token it reports reached, comes from them. Anyone who can
write a changelog can write one, so a node refuses a marker that claims what cannot be
(the whole marker; it is skipped and counted, its offset still advances):

* not a marker object (:func:`parse_marker`: not JSON, too large or deep, offsets that
  are not ``partition: offset`` integers, negative offsets);
* an input partition that does not exist (``marker_unknown_partition``);
* an offset past that input partition's end (``marker_beyond_end``): Kafka is asked
  (ListOffsets, read-uncommitted, one request for every partition in question) only
  when a claim goes past the end it last reported, and that end is cached, so a real
  marker costs about one request per input partition per batch;
* a claim Kafka could not confirm just then (``marker_unverified``; for 2 s after Kafka
  failed to answer, without asking again): refused too; the next batch's marker claims
  as much again.

Markers are not signed: users' own pipelines write them through ``streamiq.sink``
and would all need the cluster secret (docs/design.md, "Changelog records").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from streamiq.kafka.skips import Skip

__all__ = ["MAX_CLAIMS", "MAX_MARKER_BYTES", "InputEnds", "Offsets", "kafka_ends",
           "parse_marker"]

Offsets = dict[str, dict[int, int]]
TP = tuple[str, int]
#: ends of input partitions by (topic, partition), None for one that does not exist;
#: raises when Kafka cannot be asked at all
EndsQuery = Callable[[list[TP]], dict[TP, int | None]]

#: a real marker names each input partition once: a few KB
MAX_MARKER_BYTES = 1 << 20
_UNKNOWN_TTL_S = 10.0  # an input partition found missing is not asked about again so soon
_MAX_MISSING = 4096
#: input partitions one marker may name (a real one names each of its inputs' once)
MAX_CLAIMS = 10_000
_I64 = 1 << 63


def parse_marker(raw: bytes | None) -> Offsets:
    """The input offsets a marker names; Skip(``bad_marker``) if it is not one."""
    if raw is None or len(raw) > MAX_MARKER_BYTES:
        raise Skip("bad_marker", f"marker empty or larger than {MAX_MARKER_BYTES} bytes")
    try:
        doc = orjson.loads(raw)  # depth-limited: never a RecursionError
    except orjson.JSONDecodeError as exc:
        raise Skip("bad_marker", f"marker is not JSON: {str(exc)[:80]}") from None
    offsets = doc.get("offsets") if isinstance(doc, dict) else None
    if not isinstance(offsets, dict):
        raise Skip("bad_marker", "marker without an offsets object")
    out: Offsets = {}
    if sum(len(po) if isinstance(po, dict) else 1 for po in offsets.values()) > MAX_CLAIMS:
        raise Skip("bad_marker", f"marker names more than {MAX_CLAIMS} partitions")
    for t, po in offsets.items():
        if not isinstance(po, dict):
            raise Skip("bad_marker", f"marker offsets of {t[:80]!r} are not an object")
        cur = out[t] = {}
        for part, off in po.items():
            if not (isinstance(off, int) and not isinstance(off, bool) and 0 <= off < _I64
                    and part.isascii() and part.isdigit() and len(part) < 10):
                raise Skip("bad_marker", f"marker offset {t[:80]!r}[{part[:20]!r}] is "
                           "not a partition: offset")
            cur[int(part)] = off
    return out


class InputEnds:
    """The ends of input partitions as Kafka last reported them (the loop's thread)."""

    def __init__(self, query: EndsQuery, retry_s: float = 2.0) -> None:
        self._query = query
        self.ends: dict[TP, int] = {}
        self._missing: dict[TP, float] = {}  # found missing at (monotonic)
        self.queries = 0
        #: after Kafka failed to answer, claims past the known ends are refused without
        #: asking for this long (the loop does not wait out a timeout per marker)
        self.retry_s = retry_s
        self._failed = -retry_s

    def now(self, tps: list[TP]) -> dict[TP, int]:
        """The ends of ``tps`` asked of Kafka now (any thread; missing ones left out)."""
        return {tp: o for tp, o in self._query(tps).items() if o is not None}

    def check(self, offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Refuse (Skip) a marker claiming past an input partition's end or for
        one that does not exist; Kafka is asked only about partitions not known yet or
        claimed past the end known."""
        claims = {(t, p): o for t, po in offsets.items() for p, o in po.items()}
        now = time.monotonic()
        self._known(claims, now)
        ask = sorted(tp for tp, o in claims.items() if o > self.ends.get(tp, -1))
        if ask:
            self._ask(ask, now)
            self._known(claims, now)
        for tp, o in claims.items():
            if o > self.ends[tp]:
                raise Skip("marker_beyond_end", f"marker claims offset {o} of input "
                           f"partition {tp}, whose end is {self.ends[tp]}"[:200])

    def _known(self, claims: Mapping[TP, int], now: float) -> None:
        for tp in claims:
            if self._gone(tp, now):
                raise Skip("marker_unknown_partition",
                           f"marker claims input partition {tp} (it does not exist)"[:200])

    def _gone(self, tp: TP, now: float) -> bool:
        """Found missing within the last ``_UNKNOWN_TTL_S`` seconds."""
        return now - self._missing.get(tp, -_UNKNOWN_TTL_S) < _UNKNOWN_TTL_S

    def _ask(self, tps: list[TP], now: float) -> None:
        if now - self._failed < self.retry_s:
            raise Skip("marker_unverified", "input ends unknown (Kafka did not answer "
                       f"{now - self._failed:.1f} s ago)")
        self.queries += 1
        try:
            got = self._query(tps)
        except Exception as exc:  # Kafka unreachable: the claim cannot be confirmed now
            self._failed = time.monotonic()
            raise Skip("marker_unverified", f"input ends unknown ({exc!r})") from None
        if len(self._missing) > _MAX_MISSING:  # forged names: keep the memory bounded
            self._missing = {tp: t for tp, t in self._missing.items() if self._gone(tp, now)}
            if len(self._missing) > _MAX_MISSING:
                self._missing.clear()
        for tp, end in got.items():
            if end is None:
                self._missing[tp] = now
            else:
                self._missing.pop(tp, None)
                self.ends[tp] = max(self.ends.get(tp, 0), end)
        if any(tp not in got for tp in tps):
            raise Skip("marker_unverified", "Kafka did not report every input end")


#: librdkafka's codes for a partition or topic that does not exist
_MISSING = ("_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_NOENT")


def kafka_ends(conf: Mapping[str, Any], timeout: float = 5.0) -> EndsQuery:
    """An ``EndsQuery`` over Kafka's ListOffsets (latest, read-uncommitted, as the
    pipeline's source reads its ends), through one admin client made on first use."""
    admin: list[Any] = []

    def query(tps: list[TP]) -> dict[TP, int | None]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        if not admin:
            admin.append(AdminClient({k: v for k, v in conf.items() if k not in (
                "group.id", "enable.auto.commit", "enable.auto.offset.store",
                "auto.offset.reset", "fetch.wait.max.ms")}))
        asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
        futures = admin[0].list_offsets(asked, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                        request_timeout=timeout)
        out: dict[TP, int | None] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(fut.result(timeout).offset)
            except KafkaException as exc:
                if exc.args[0].name() in _MISSING:
                    out[(tp.topic, tp.partition)] = None
        return out

    return query
