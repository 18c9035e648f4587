"""Cluster membership through a heartbeat topic (``KafkaMembership``).

Each node publishes a heartbeat every ``heartbeat_ms`` to the cluster's membership topic
of the current epoch, ``_streamiq-<cluster>-members-<epoch>`` (``routing/epochs.py``: a
new topic every ``membership_period_s``, old ones deleted, so heartbeats never pile up),
carrying its endpoint and, per view partition it materialises, its changelog offset
and lag. Every node reads the topic, so every node sees the same members and the
same replica freshness. A member silent for ``member_timeout_ms`` is dead (1.5 s by
default: inside ksqlDB's 2 s detection target, without waiting for a broker session
timeout); a node that stops cleanly publishes ``leaving`` and is dropped at once.
Only members of the same cluster topic are ever routed to.

Its three threads (heartbeat publisher, listener, membership-topic keeper) are supervised
(``streamiq/supervise.py``): a crash restarts the thread with a fresh Kafka client. A
record on the topic that is not a valid heartbeat (``routing/heartbeats.py``: not JSON,
nested too deep, not an object, wrong types, an endpoint that is not ``host:port``, a
partitions map with junk, over ``MAX_HEARTBEAT_BYTES``) is skipped and counted per
reason in ``skips``, never fatal: one bad record must not make every node believe its
peers are dead. While the listener is down
(between a crash and its restart, or after ``stop``) the members' clocks are frozen: a
node that cannot hear keeps its last view rather than declaring every peer dead, and
the time it was deaf is credited back to every member when it hears again.

With a cluster secret (``--cluster-secret``) every heartbeat carries an HMAC-SHA256 of
its value, keyed by the secret, in the record header ``streamiq-sig``; a record without
a valid one is skipped and counted like any bad record, before its content is even
parsed. So only a holder of the secret joins the cluster: a forged heartbeat cannot
claim partitions, nor make nodes connect to an address it names. The signed value
binds its send time and number within the incarnation, so a replayed heartbeat (a
dead node's, re-produced) is refused and counted (``replayed``, ``clock_skew``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from streamiq.kafka.admin import delete_topics, ensure_topics, topic_names
from streamiq.kafka.skips import Skips
from streamiq.routing.base import Member
from streamiq.routing.epochs import EpochTopics
from streamiq.routing.heartbeats import (
    MAX_HEARTBEAT_BYTES,
    SIGNATURE_HEADER,
    BadHeartbeat,
    Freshness,
    Headers,
    Heartbeat,
    PartitionReport,
    Report,
    encode,
    parse,
    parse_heartbeat,
    sign,
    signed,
)
from streamiq.supervise import Supervisor

__all__ = ["MAX_HEARTBEAT_BYTES", "MAX_SKEW_S", "SIGNATURE_HEADER", "BadHeartbeat",
           "Heartbeat", "KafkaMembership", "Member", "PartitionReport", "Report",
           "members_topic", "parse_heartbeat", "sign", "signed"]

log = logging.getLogger("streamiq.membership")

_SELF_TTL = 0.05  # seconds this node's own report may be reused by live()
#: signed heartbeats sent further than this from a receiver's clock are refused (node
#: clocks agree far closer under NTP; delivery delays under load stay far below)
MAX_SKEW_S = 30.0


def members_topic(cluster: str) -> str:
    """The base name of a cluster's membership topics (one per epoch is ``<base>-<n>``)."""
    return f"_streamiq-{cluster}-members"


class KafkaMembership:
    """Publishes this node's heartbeat and tracks the live members of the cluster
    (the ``Membership`` protocol of ``routing/base.py``, through Kafka)."""

    def __init__(self, kafka_conf: dict[str, Any], topic: str, endpoint: str,
                 report: Callable[[], Report],
                 heartbeat_ms: int = 250, timeout_ms: int = 1500,
                 supervisor: Supervisor | None = None, period_s: float = 60.0,
                 secret: bytes | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._conf = kafka_conf
        self._clock = clock  # seconds, monotonic (a test moves it by hand)
        self._wall = wall  # seconds since the Unix epoch: heartbeats' sent_at
        self._secret = secret  # heartbeats are signed and checked with it (None: not)
        self._fresh = Freshness(MAX_SKEW_S, require=secret is not None)
        self._seq = 0  # heartbeats sent by this incarnation
        self.topics = EpochTopics(topic, period_s)
        self.endpoint = endpoint
        self.incarnation = uuid.uuid4().hex
        self.started_at = time.time()
        self._report = report
        self._interval = heartbeat_ms / 1000
        self._timeout = timeout_ms / 1000
        self._members: dict[str, Member] = {}
        self._suspects: dict[str, float] = {}
        self._lock = threading.Lock()
        self._own: Member | None = None
        self._stop = threading.Event()
        self.supervisor = supervisor or Supervisor()
        self._threads = [self.supervisor.thread("heartbeat", self._publish, self._stop),
                         self.supervisor.thread("members", self._listen, self._stop),
                         self.supervisor.thread("member-topics", self._keep_topics, self._stop)]
        self.skips = Skips(log, "members record")  # records not used, per reason
        # since when the listener has not been listening (None: it is); set until the
        # listener first runs, so members cannot expire before anything was heard
        self._deaf_since: float | None = self._clock()
        # when this node last heard its own heartbeat on the topic (None: not yet)
        self._heard_self: float | None = None

    @property
    def skipped(self) -> int:
        """Records on the members topics that were not used as heartbeats."""
        return self.skips.total

    def start(self) -> None:
        self.create_topics(time.time())  # before the first heartbeat needs them
        for t in self._threads:
            t.start()

    def create_topics(self, now: float) -> None:
        """Create the current and next epochs' topics (idempotent)."""
        config = {"retention.ms": str(self.topics.retention_ms())}
        ensure_topics(self._conf, dict.fromkeys(self.topics.ahead(now), 1), config=config)

    def _keep_topics(self) -> None:
        """Create each epoch's topic ahead of time; delete those no node uses any more.
        In a thread of its own so that slow topic administration never delays a
        heartbeat; a failure (say, the broker is briefly away) is retried next round,
        as the next epoch's topic is made a whole period before it is needed."""
        while not self._stop.is_set():
            now = time.time()
            try:
                self.create_topics(now)
                expired = self.topics.expired(now, topic_names(self._conf))
                for t in delete_topics(self._conf, expired):
                    log.info("members: deleted expired membership topic %s", t)
            except Exception as exc:
                log.warning("members: membership topic upkeep failed (retried in %.0f s): %r",
                            self.topics.period_s / 4, exc)
            self._stop.wait(self.topics.period_s / 4)

    def silence(self) -> None:
        """Stop heartbeating (a last ``leaving`` heartbeat is sent if the publisher can)
        and listening, without waiting: callable from any thread, a supervised one too."""
        self._stop.set()

    @property
    def silenced(self) -> bool:
        """Stopped or silenced: no heartbeat is sent any more."""
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.is_alive() and t is not threading.current_thread():
                t.join(5)

    def live(self) -> dict[str, Member]:
        """Members heard from within the timeout (always including this node).

        Members are judged at the last moment the members topic is known to have
        delivered: now while this node hears its own heartbeats, else when it last did
        (a partition leader lost, a broker restarting: every member falls silent at
        once, and that is the log's outage, not the members'), or when its listener
        stopped.
        """
        now = self._clock()
        horizon = now
        if self._deaf_since is not None:
            horizon = self._deaf_since
        if self._heard_self is not None:  # one missed heartbeat is not an outage yet
            horizon = min(horizon, self._heard_self + 2 * self._interval)
        with self._lock:
            out = {e: m for e, m in self._members.items()
                   if horizon - m.seen <= self._timeout and self._suspects.get(e, 0) < m.seen}
        if self.endpoint not in out:
            out[self.endpoint] = self._me(now)
        return out

    def _me(self, now: float) -> Member:
        """This node's own entry, rebuilt at most every ``_SELF_TTL`` seconds: routing
        asks for the members on every query, and the report walks every partition."""
        if self._own is None or now - self._own.seen > _SELF_TTL:
            self._own = Member(self.endpoint, self.incarnation, now, self._report(),
                               self.started_at)
        return self._own

    def suspect(self, endpoint: str) -> None:
        """Route around a member that refused a connection until it heartbeats again."""
        if endpoint == self.endpoint:
            return
        with self._lock:
            self._suspects[endpoint] = self._clock()

    def _heartbeat(self, leaving: bool = False) -> bytes:
        self._seq += 1
        doc = {"endpoint": self.endpoint, "incarnation": self.incarnation,
               "started_at": self.started_at, "sent_at": self._wall(), "seq": self._seq,
               "leaving": leaving, "partitions": {} if leaving else self._report()}
        return encode(doc)

    def _publish(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"linger.ms": 0, "acks": "1", **self._conf})

        def send(value: bytes) -> None:
            headers: list[tuple[str, str | bytes | None]] | None = (
                [(SIGNATURE_HEADER, sign(self._secret, value))] if self._secret else None)
            producer.produce(self.topics.publish(time.time()), key=self.endpoint.encode(),
                             value=value, headers=headers)

        try:
            while not self._stop.is_set():
                send(self._heartbeat())
                producer.poll(0)
                self._stop.wait(self._interval)
            send(self._heartbeat(leaving=True))
        finally:
            producer.flush(2)

    def _listen(self) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer({"group.id": "streamiq-membership", "enable.auto.commit": False,
                             **self._conf})
        heard: set[str] = set()
        try:
            while not self._stop.is_set():
                wanted = set(self.topics.listen(time.time()))
                if wanted != heard:  # a new epoch: heartbeats repeat, so reading from the
                    # end of a newly listened topic misses nothing that matters
                    consumer.incremental_unassign([TopicPartition(t, 0) for t in heard - wanted])
                    consumer.incremental_assign(
                        [TopicPartition(t, 0, OFFSET_END) for t in sorted(wanted - heard)])
                    heard = wanted
                msgs = consumer.consume(100, 0.1)
                self.hearing()
                for m in msgs:
                    value = m.value()
                    if not m.error() and value is not None:
                        self.receive(value, m.headers())
        finally:
            self.deaf()
            try:
                consumer.close()
            except Exception as exc:
                log.warning("members: closing the consumer failed: %r", exc)

    def deaf(self) -> None:
        """The listener stopped hearing (crashed or stopped): freeze the members' clocks."""
        if self._deaf_since is None:
            self._deaf_since = self._clock()

    def hearing(self) -> None:
        """The listener hears again: credit the members with the time it was deaf."""
        deaf = self._deaf_since
        if deaf is None:
            return
        with self._lock:
            self._credit(self._clock() - deaf)
            self._deaf_since = None

    def _credit(self, gap: float) -> None:
        """Move the members' last heartbeats ``gap`` seconds on: time this node could
        not hear them (the lock held)."""
        for e, m in self._members.items():
            if self._suspects.get(e, 0) < m.seen:  # a suspect stays one
                m.seen += gap

    def receive(self, raw: bytes, headers: Headers = None) -> bool:
        """Apply one record of the members topic; False (counted) if it was skipped."""
        try:
            if not signed(self._secret, raw, headers):
                raise BadHeartbeat("no valid signature (a member without the cluster secret)",
                                   "unsigned")
            doc, sent = parse(raw)
            self._fresh.check(doc, sent, self._wall())
        except BadHeartbeat as exc:
            self.skips.skip(exc.reason, str(exc))
            return False
        except Exception as exc:  # a record no check foresaw: still never fatal
            self.skips.skip("undecodable", repr(exc))
            return False
        self._on_heartbeat(doc)
        return True

    def _on_heartbeat(self, doc: Heartbeat) -> None:
        endpoint = doc["endpoint"]
        now = self._clock()
        if endpoint == self.endpoint:
            if doc["incarnation"] == self.incarnation:  # the topic delivers
                with self._lock:
                    silent = 0.0 if self._heard_self is None else now - self._heard_self
                    if silent > 2 * self._interval:  # it did not for a while
                        self._credit(silent - 2 * self._interval)
                    self._heard_self = now
            return
        with self._lock:
            if doc["leaving"]:
                self._members.pop(endpoint, None)
            else:
                self._members[endpoint] = Member(endpoint, doc["incarnation"], now,
                                                 doc["partitions"], doc["started_at"])
