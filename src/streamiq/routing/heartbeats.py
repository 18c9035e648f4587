"""Heartbeat records of the members topics: their form, signature, freshness and size.

A heartbeat is one JSON object (``KafkaMembership._heartbeat``)::

    {"endpoint": "10.0.0.5:9001", "incarnation": "<random per start>",
     "started_at": 1.7e9, "sent_at": 1.7e9, "seq": 42, "leaving": false,
     "partitions": {"<view>": {"<p>": {"offset": 120, "lag": 0, "restored": 1}}}}

(a partition being copied from a peer: ``{"offset": 0, "lag": -1, "restored": 0,
"copied": <thousandths received>}``.)

:func:`parse` validates any record into a :class:`Heartbeat` or raises
:class:`BadHeartbeat` naming a reason (the ``reason`` label of the skip counter).

Replays: with a cluster secret the signature (``streamiq-sig``, HMAC-SHA256 of the
value) covers ``sent_at`` (wall clock), ``seq`` (counted from 0 per incarnation) and
``incarnation``, so a captured heartbeat cannot be re-dated. :class:`Freshness`
refuses a signed heartbeat without them, one sent more than ``skew_s`` from the
receiver's clock, and one whose ``seq`` is not above the newest already heard from
that member's incarnation: re-producing a dead node's last heartbeat does not bring it
back. (The order is ``seq``'s, not the clock's: a node whose clock steps back is not
refused.)

Size: a heartbeat carries ~45 bytes per partition held. :func:`encode` leaves views
out (the most partitions first, logged) rather than send a record over
``SEND_LIMIT``, below the broker's default ``message.max.bytes`` (1 MiB): a producer
error there would stop every heartbeat of the node. The catalog's bounds
(``max_view_partitions`` x ``max_views``) keep a node holding everything below it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, NotRequired, TypedDict

from streamiq.kafka.skips import Skip, load_object

__all__ = ["MAX_HEARTBEAT_BYTES", "SEND_LIMIT", "SIGNATURE_HEADER", "BadHeartbeat",
           "Freshness", "Headers", "Heartbeat", "PartitionReport", "Report", "Sent", "encode",
           "parse", "parse_heartbeat", "sign", "signed"]

log = logging.getLogger("streamiq.membership")

#: records larger than this are not read as heartbeats
MAX_HEARTBEAT_BYTES = 1 << 20
#: a heartbeat is never sent larger than this (the broker's default limit, less room
#: for the record's key, headers and batch framing)
SEND_LIMIT = MAX_HEARTBEAT_BYTES - (8 << 10)
SIGNATURE_HEADER = "streamiq-sig"
#: a record's headers as confluent_kafka gives them (``Message.headers()``)
Headers = (Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]
           | None)
_STATE_FIELDS = ("offset", "lag", "restored")
_trimmed = 0  # heartbeats sent with views left out


class PartitionReport(TypedDict):
    """What a member says of one partition it holds, in every heartbeat."""

    offset: int  # the next changelog offset it will apply
    lag: int  # changelog records behind the end
    restored: int  # 1 once its initial restore is done (it may answer), else 0
    #: while the partition is copied from a peer (offset 0, lag -1): thousandths received
    copied: NotRequired[int]


#: view -> partition -> report: a member's partitions, as heartbeats carry them.
Report = dict[str, dict[int, PartitionReport]]


class Heartbeat(TypedDict):
    """A validated record of the members topic (``parse_heartbeat``)."""

    endpoint: str  # host:port peers reach it on
    incarnation: str  # new on every start
    leaving: bool  # a clean stop: drop it at once
    started_at: float
    partitions: Report


class BadHeartbeat(Skip):
    """A record on the members topic that is not used as a heartbeat."""

    def __init__(self, detail: str, reason: str = "bad_heartbeat") -> None:
        super().__init__(reason, detail)


def sign(secret: bytes, value: bytes) -> bytes:
    """A heartbeat's signature: hex HMAC-SHA256 of its value under the cluster secret."""
    return hmac.new(secret, value, hashlib.sha256).hexdigest().encode()


def signed(secret: bytes | None, value: bytes, headers: Headers) -> bool:
    """True when there is no secret, or ``headers`` (a record's, as the Kafka client
    gives them: name/value pairs, a mapping or None) carry ``value``'s signature."""
    if secret is None:
        return True
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    got = next((v for k, v in pairs if k == SIGNATURE_HEADER), None)
    return isinstance(got, bytes) and hmac.compare_digest(got, sign(secret, value))


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _time(v: Any, what: str) -> float:
    if (not isinstance(v, (int, float)) or isinstance(v, bool)
            or not -1e18 < v < 1e18 or math.isnan(v)):  # no float() of a huge int
        raise BadHeartbeat(f"{what} is not a number")
    return float(v)


def _endpoint(endpoint: object) -> str:
    host, _, port = endpoint.rpartition(":") if isinstance(endpoint, str) else ("", "", "")
    if (not isinstance(endpoint, str) or not host or not port.isascii()
            or not port.isdigit() or len(port) > 5 or not 1 <= int(port) <= 65535
            or any(c.isspace() or c in "/?#@" for c in host)):
        raise BadHeartbeat(f"endpoint {str(endpoint)[:80]!r} is not host:port")
    return endpoint


def _partitions(raw_parts: Any) -> Report:
    if not isinstance(raw_parts, dict):
        raise BadHeartbeat("partitions is not an object")
    parts: Report = {}
    for view, ps in raw_parts.items():
        if not isinstance(ps, dict):
            raise BadHeartbeat(f"partitions of {view[:80]!r} is not an object")
        out = parts[view] = {}
        for p, st in ps.items():
            if not (isinstance(p, str) and p.isascii() and p.isdigit() and len(p) <= 10):
                raise BadHeartbeat(f"{view[:80]!r} partition {p[:20]!r} is not a number")
            if not isinstance(st, dict) or not all(_int(st.get(f)) for f in _STATE_FIELDS):
                raise BadHeartbeat(f"{view[:80]!r} partition {p}: expected integer "
                                   f"offset, lag and restored")
            report = out[int(p)] = PartitionReport(offset=st["offset"], lag=st["lag"],
                                                   restored=st["restored"])
            if _int(st.get("copied")):
                report["copied"] = st["copied"]
    return parts


class Sent(NamedTuple):
    """When a heartbeat says it was sent: wall-clock time and its number (None: not said)."""

    at: float | None
    seq: int | None


def parse(raw: Any) -> tuple[Heartbeat, Sent]:
    """A validated heartbeat and when it says it was sent."""
    try:
        doc = load_object(raw, MAX_HEARTBEAT_BYTES)
    except Skip as exc:
        raise BadHeartbeat(str(exc), exc.reason) from None
    endpoint = _endpoint(doc.get("endpoint"))
    incarnation = doc.get("incarnation")
    if not isinstance(incarnation, str) or not incarnation:
        raise BadHeartbeat("incarnation is not a string")
    leaving = doc.get("leaving", False)
    if not isinstance(leaving, bool):
        raise BadHeartbeat("leaving is not a boolean")
    started_at = _time(doc.get("started_at", 0), "started_at")
    sent_at = None if doc.get("sent_at") is None else _time(doc["sent_at"], "sent_at")
    seq = doc.get("seq")
    if seq is not None and not (_int(seq) and 0 <= seq < 1 << 63):
        raise BadHeartbeat("seq is not a non-negative integer")
    hb = Heartbeat(endpoint=endpoint, incarnation=incarnation, leaving=leaving,
                   started_at=started_at, partitions=_partitions(doc.get("partitions", {})))
    return hb, Sent(sent_at, seq)


def parse_heartbeat(raw: bytes) -> Heartbeat:
    """A validated heartbeat: ``endpoint`` (host:port), ``incarnation``, ``leaving``,
    ``started_at`` and ``partitions`` (view -> partition -> {offset, lag, restored}).
    Raises BadHeartbeat for anything else."""
    return parse(raw)[0]


class Freshness:
    """Refuses heartbeats replayed or sent too far from this node's clock (signed ones:
    with no secret anyone may write any heartbeat anyway, so only the order is kept)."""

    def __init__(self, skew_s: float, require: bool) -> None:
        self.skew_s = skew_s
        self._require = require  # a signed cluster: sent_at must be there
        #: (endpoint, incarnation) -> (newest seq heard, when it was heard)
        self._newest: dict[tuple[str, str], tuple[int, float]] = {}

    def check(self, hb: Heartbeat, sent: Sent, now: float) -> None:
        """Raise BadHeartbeat (``unbound``, ``clock_skew``, ``replayed``) or remember it."""
        if sent.at is None or sent.seq is None:
            if self._require:
                raise BadHeartbeat("a signed heartbeat without sent_at and seq (binds no "
                                   "time)", "unbound")
            return
        if self._require and abs(now - sent.at) > self.skew_s:
            raise BadHeartbeat(f"sent {now - sent.at:.1f} s from this node's clock (more "
                               f"than {self.skew_s:.0f} s)", "clock_skew")
        key = (hb["endpoint"], hb["incarnation"])
        newest = self._newest.get(key)
        if newest is not None and sent.seq <= newest[0]:
            raise BadHeartbeat(f"{key[0]} ({key[1][:12]}): seq {sent.seq} is not newer than "
                               f"{newest[0]}, already heard", "replayed")
        if newest is None:  # a new incarnation: forget those silent past any valid replay
            self._newest = {k: v for k, v in self._newest.items()
                            if v[1] >= now - 2 * self.skew_s}
        self._newest[key] = (sent.seq, now)


def encode(doc: dict[str, Any]) -> bytes:
    """A heartbeat's value, never over SEND_LIMIT: views with the most partitions are
    left out of ``partitions`` until it fits (each time logged: a node holding that much
    should raise ``max_view_partitions``/``max_views`` bounds less far)."""
    global _trimmed
    raw = json.dumps(doc, separators=(",", ":")).encode()
    if len(raw) <= SEND_LIMIT:
        return raw
    parts = dict(doc.get("partitions") or {})
    size = len(raw)
    while parts and len(raw) > SEND_LIMIT:
        del parts[max(parts, key=lambda v: len(parts[v]))]
        raw = json.dumps({**doc, "partitions": parts}, separators=(",", ":")).encode()
    _trimmed += 1
    if _trimmed & (_trimmed - 1) == 0:  # 1st, 2nd, 4th...: rate-limited
        log.error("members: a heartbeat of %d bytes is over %d: views left out of it, so "
                  "peers do not route them here (%d times so far)", size, SEND_LIMIT, _trimmed)
    return raw
