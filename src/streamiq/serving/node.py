"""A serving node: stores, materializer, membership and router under one lifecycle.

The node fails closed. Its background parts (the materializer thread, the heartbeat
publisher and the members listener threads, the ``sync`` task) run under one
``Supervisor``: a part that raises is logged, counted (``faults`` in ``describe()``, so in
``/health``) and restarted with backoff. While the materializer is down it holds nothing,
so the node reports no partition in its heartbeats, answers no lookup locally (peers
route to standbys within a heartbeat) and ``/health`` is 503. A part that keeps failing
is fatal: the node stops answering, stops heartbeating (peers drop it at once through
its ``leaving`` heartbeat, or within ``member_timeout_ms`` if it cannot send one), turns
not ready and ``run_node`` (``serving/main.py``) exits non-zero, so that ``streamiq up``
or any process supervisor starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric

from streamiq.config import Settings
from streamiq.errors import BadRequest, NotUpToBound, Overloaded
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.clientlog import logged
from streamiq.kafka.skips import Skips
from streamiq.metrics import Latency
from streamiq.routing.base import Membership
from streamiq.routing.membership import KafkaMembership, Report, members_topic
from streamiq.routing.router import Router
from streamiq.serving.changelog.consistency import Token, row_reflects, token_for
from streamiq.serving.changelog.discovery import Discovery
from streamiq.serving.changelog.materializer import Materializer
from streamiq.serving.changelog.partition import (
    CopyProgress,
    Replaying,
    RestoreProgress,
    Transfer,
)
from streamiq.serving.changelog.ticks import Ticker
from streamiq.state import Store, open_store
from streamiq.supervise import Supervisor
from streamiq.views.base import CHANGELOG_TOPIC_CONFIG, App, View, load_app
from streamiq.views.catalog import CATALOG_TOPIC_CONFIG, ViewSpec, catalog_topic

__all__ = ["Node", "Parts", "state_path"]

log = logging.getLogger("streamiq.node")

#: a read still waiting for its position after this long asks for a newer tick
RETICK_S = 0.5
#: a consistent read's cut, when this node's partitions already reflect one, is at most
#: this old (a tick written since): no tick to write and wait for (``settled_cut``)
SETTLED_S = 0.25
#: a settled cut asks a new tick where the newest is older than this (the next reads')
REFRESH_S = 0.05


#: folders of a node's state folder holding partition copies in transit: those being
#: received from a peer (``cluster/bootstrap.py``) and sent to one
#: (``peer/snapshots.py``). Emptied as the node opens: a crash mid-copy leaves files
COPIES, SNAPSHOTS = "_copies", "_snapshots"


def state_path(root: Path, endpoint: str) -> Path:
    """A node's own state folder under ``--state-dir`` (its stores, its SQL spill)."""
    return root / re.sub(r"[^A-Za-z0-9_.-]", "_", endpoint)


@dataclass(frozen=True)
class Parts:
    """What a running node is made of, built whole by ``Node.open`` (or a test)."""

    partitions: dict[str, int]  # view -> changelog partitions
    topics: dict[str, str]  # view -> changelog topic (real name)
    stores: dict[str, Store]
    materializer: Materializer
    membership: Membership
    router: Router
    discovery: Discovery


def _build(settings: Settings, views: dict[str, View], supervisor: Supervisor,
           late: list[Node]) -> Parts:
    """Blocking: topics ensured, stores opened, the materializer and membership built
    (not started)."""
    s = settings
    topics = {name: s.topic(v.changelog_topic) for name, v in views.items()}
    kafka = logged(s.kafka())  # librdkafka's lines: rate-limited, in the log format
    counts = ensure_topics(kafka, dict.fromkeys(topics.values(), s.partitions),
                           config=CHANGELOG_TOPIC_CONFIG)
    partitions = {name: counts[t] for name, t in topics.items()}
    root = state_path(s.state_dir, s.endpoint)
    for transit in (COPIES, SNAPSHOTS):  # left by a process that died mid-copy
        shutil.rmtree(root / transit, ignore_errors=True)
    stores = {name: open_store(s.store, root / name, s.store_memory_mb) for name in views}
    materializer = Materializer(kafka, views, stores, topics, supervisor,
                                on_apply=lambda: late[0].applied() if late else None,
                                partitions=partitions)
    # the node is made from these parts: the callbacks reach it once it exists (late)
    membership = KafkaMembership(kafka, s.topic(members_topic(s.cluster)), s.endpoint,
                                 lambda: late[0].report() if late else {},
                                 s.heartbeat_ms, s.member_timeout_ms, supervisor,
                                 s.membership_period_s, secret=_secret(s))
    router = Router(membership, partitions, s.standby_replicas,
                    [name for name, v in views.items() if v.is_global])
    catalog = s.topic(catalog_topic(s.cluster))
    ensure_topics(kafka, {catalog: 1}, config=CATALOG_TOPIC_CONFIG)
    discovery = Discovery(kafka, catalog, lambda spec: late[0].serve_spec(spec), supervisor,
                          max_partitions=s.max_view_partitions, max_views=s.max_views)
    return Parts(partitions, topics, stores, materializer, membership, router, discovery)


def _secret(settings: Settings) -> bytes | None:
    if settings.cluster_secret is None:
        log.warning("no --cluster-secret: membership is not authenticated, any writer to "
                    "the members topic can join this cluster")
        return None
    return settings.cluster_secret.get_secret_value().encode()


class Node:
    """Owns the node's state; the query engines and the coordinator read it.

    Built whole by ``await Node.open(settings)``, so every part is there from the start;
    ``Node(settings, app, parts, supervisor)`` puts one together from given parts (tests).
    """

    def __init__(self, settings: Settings, app: App, parts: Parts,
                 supervisor: Supervisor) -> None:
        self.settings = settings
        self.app = app
        self.views: dict[str, View] = {v.name: v for v in app.views}
        self.endpoint = settings.endpoint
        self.partitions = parts.partitions
        self.topics = parts.topics
        self.stores = parts.stores
        self.materializer = parts.materializer
        self.membership = parts.membership
        self.router = parts.router
        self.discovery = parts.discovery
        #: skips of other topics read for this node (the app adds "progress")
        self.reads: dict[str, Skips] = {}
        self.supervisor = supervisor
        supervisor.on_fatal = self._fatal
        self._sync_task: asyncio.Task[None] | None = None
        self.assigning = False
        self.stopping = False
        self.wanted: set[tuple[str, int]] = set()
        self.waiters = 0  # queries waiting for a position now (at most settings.max_waiters)
        self._changed = asyncio.Event()  # set when records were applied, then replaced
        #: view -> the input topics whose ticks its changelog answers (from the catalog)
        self.tick_topics: dict[str, frozenset[str]] = {}
        self.ticker = Ticker(self._tick_producer)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: called once when a part cannot recover (serving/main.py: stop serving, exit non-zero)
        self.on_fatal: Callable[[], None] | None = None
        #: closed first when the node stops (serving/main.py: the SQL front end)
        self.closing: list[Callable[[], Awaitable[None]]] = []
        #: more of this node's /metrics (serving/main.py: the SQL front end's)
        self.collectors: list[Callable[[], Iterator[Metric]]] = []
        #: partitions being copied from a peer now (``serving/cluster/bootstrap.py``)
        #: and replayed by a process of their own (``serving/changelog/replayer.py``)
        self.transfers: dict[tuple[str, int], Transfer | Replaying] = {}

    @classmethod
    async def open(cls, settings: Settings, app: App | None = None,
                   copier: Callable[[Node], Callable[[str, int], bool]] | None = None
                   ) -> Node:
        """Build every part (topics, stores, materializer, membership, router) and start
        them: the materializer restoring, heartbeats flowing, the assignment loop.
        ``copier``: what copies a partition never held from a peer, given the node
        before anything is assigned (``serving/cluster/bootstrap.py``; None: the
        changelog only)."""
        if app is None:  # no --app or --views-module given: the catalog's views only
            chosen = "app" in settings.model_fields_set or settings.views_module
            app = (load_app(settings.app, settings.views_module) if chosen
                   else App(name="catalog", topics=(), views=()))
        supervisor = Supervisor()
        late: list[Node] = []
        views = {v.name: v for v in app.views}
        parts = await asyncio.to_thread(_build, settings, views, supervisor, late)
        node = cls(settings, app, parts, supervisor)
        late.append(node)
        if copier is not None:
            node.materializer.bootstrap = copier(node)
        await asyncio.to_thread(node.discovery.load)  # the views published so far
        await node.start()
        return node

    @property
    def failed(self) -> str | None:
        """The part that could not recover, None while the node is healthy."""
        return self.supervisor.failed

    # -- lifecycle --
    async def start(self) -> None:
        self.materializer.start()
        self.discovery.start()
        await asyncio.to_thread(self.membership.start)  # creates topics: not on the loop
        self._sync_task = self.supervisor.task("sync", self._sync_loop)

    def _fatal(self, part: str, exc: BaseException) -> None:
        """A part cannot recover (any thread; once): answer nothing, stop heartbeating,
        then let ``on_fatal`` end the process."""
        log.critical("node %s failed: %s could not recover (%r); not ready, heartbeat "
                     "stopped, exiting", self.endpoint, part, exc)
        self.materializer.halt()
        self.membership.silence()
        if self.on_fatal is not None:
            self.on_fatal()

    async def stop(self) -> None:
        """Leave the cluster and close everything (once; later calls return at once)."""
        if self.stopping:
            return
        self.stopping = True
        self.supervisor.stopping = True
        for close in self.closing:
            await close()
        if self._sync_task is not None:
            self._sync_task.cancel()
        await asyncio.to_thread(self.membership.stop)
        await asyncio.to_thread(self.discovery.stop)
        await asyncio.to_thread(self.materializer.stop)
        await asyncio.to_thread(self.ticker.close)
        for store in self.stores.values():
            store.close()

    async def _sync_loop(self) -> None:
        """Keep what this node materialises equal to what the router wants of it."""
        # Listen for one timeout's worth of heartbeats before claiming partitions, so a
        # node joining a running cluster does not briefly claim everything.
        if not self.assigning:  # not again when the supervisor restarts the loop
            await asyncio.sleep(self.settings.heartbeat_ms * 3 / 1000)
            self.assigning = True
        while True:
            held = set(self.materializer.holding())
            wanted = self.router.wanted_local(held)
            if wanted != held:
                log.info("materialising %s", sorted(wanted))
            self.materializer.want(wanted)
            self.wanted = wanted
            await asyncio.sleep(0.1)

    # -- views found on the catalog (serving/changelog/discovery.py) --
    def serve_spec(self, spec: ViewSpec) -> None:
        """Serve a view described on the catalog (the discovery thread; blocking). A
        view this node already serves from its own app keeps that description, if the
        two agree on what the changelog holds (ValueError otherwise: refused)."""
        view = spec.to_view()
        self.tick_topics = {**self.tick_topics, spec.name: frozenset(spec.ticks)}
        own = self.views.get(spec.name)
        if own is not None and spec.name not in self.discovery.specs:
            mine = (own.key_columns, own.windowed, self.topics[own.name],
                    self.partitions[own.name])
            theirs = (view.key_columns, view.windowed, spec.changelog_topic, spec.partitions)
            if mine != theirs:
                raise ValueError(f"this node's app describes it as {mine}, the catalog as "
                                 f"{theirs}")
            return
        if own is None:  # new: store, materializer and routing first, the view last
            root = state_path(self.settings.state_dir, self.endpoint)
            store = open_store(self.settings.store, root / spec.name,
                               self.settings.store_memory_mb)
            self.materializer.add_view(view, store, spec.changelog_topic, spec.partitions)
            self.stores = {**self.stores, spec.name: store}
            self.topics = {**self.topics, spec.name: spec.changelog_topic}
            self.partitions = {**self.partitions, spec.name: spec.partitions}
            self.router.add_view(spec.name, spec.partitions, view.is_global)
        self.views = {**self.views, spec.name: view}

    # -- state --
    def state_root(self) -> Path:
        """This node's own state folder (its stores, its SQL spill, copies in transit)."""
        return state_path(self.settings.state_dir, self.endpoint)

    def report(self) -> Report:
        """Per view partition: next changelog offset and lag (published in heartbeats);
        a partition being copied from a peer is restoring, with the thousandths of the
        copy received (``copied``)."""
        out: Report = {}
        for (view, p), t in list(self.transfers.items()):
            out.setdefault(view, {})[p] = {"offset": 0, "lag": -1, "restored": 0,
                                           "copied": t.permil()}
        for (view, p), st in self.materializer.holding().items():
            out.setdefault(view, {})[p] = {"offset": st.offset, "lag": st.lag,
                                           "restored": int(st.restored)}
        return out

    def positions(self) -> dict[str, dict[int, str]]:
        """Per view partition held: the newest input it is known to reflect (its markers
        and ticks; rows reflect their own keys further), as a position token
        (``topic:partition:offset,...``, the offset the last record reflected)."""
        out: dict[str, dict[int, str]] = {}
        for (view, p), st in self.materializer.holding().items():
            out.setdefault(view, {})[p] = ",".join(
                token_for(t, ip, nxt - 1) for t, po in sorted(st.position.items())
                for ip, nxt in sorted(po.items()) if nxt > 0)
        return out

    def holds(self, view: str, partition: int) -> bool:
        """True when this node can answer for the partition (held and restored)."""
        st = self.materializer.states.get((view, partition))
        return st is not None and st.restored

    def lag(self, view: str, partition: int) -> int:
        st = self.materializer.states.get((view, partition))
        return -1 if st is None else st.lag

    def ready(self) -> bool:
        """Every partition this node should hold is held and restored (never after a
        part failed for good; while the materializer restarts it holds nothing)."""
        if not self.assigning or self.failed is not None:
            return False
        held = self.materializer.holding()
        return all(vp in held and held[vp].restored for vp in self.wanted)

    def applied(self) -> None:
        """Records were applied (the materializer's thread): wake the position waiters."""
        loop = self._loop
        if loop is not None and self.waiters:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_position(self, view: str, partition: int, tokens: list[Token],
                            timeout: float, key: bytes | None = None) -> bool:
        """Wait until the partition reflects the tokens, or (``key``: a lookup's store
        key) that key's stored row does (its input positions, ``consistency.py``); False
        on timeout. Waiters sleep until the materializer applies records (re-checking
        at least every 0.1 s), and at most ``max_waiters`` wait at once (``Overloaded``
        beyond)."""
        arrived = time.monotonic()
        deadline = arrived + timeout
        if self._reflects(view, partition, tokens, key):
            return True
        self._ask_ticks(view, partition, tokens, arrived)
        if self.waiters >= self.settings.max_waiters:
            raise Overloaded(f"{self.endpoint} already holds {self.waiters} queries waiting "
                             f"for a position (--max-waiters)", served_by=self.endpoint)
        self._loop = asyncio.get_running_loop()  # where applied() wakes the waiters
        self.waiters += 1
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or self.stopping:
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, 0.1)):
                        await self._changed.wait()
                if self._reflects(view, partition, tokens, key):
                    return True
                # again (a tick after since), each time: the partition may be held only
                # now, and a tick may be lost with a restarted task; at most one per
                # RETICK_S while nothing reflects
                self._ask_ticks(view, partition, tokens,
                                max(arrived, time.monotonic() - RETICK_S))
        finally:
            self.waiters -= 1

    def _ask_ticks(self, view: str, partition: int, tokens: list[Token], since: float) -> None:
        """A tick in each input partition of ``tokens`` the partition does not reflect yet,
        written after ``since`` (views whose changelog answers ticks: ``ticks.py``)."""
        ticking = self.tick_topics.get(view)
        st = self.materializer.states.get((view, partition))
        if not ticking or st is None:
            return
        for t, p, o in tokens:
            if t in ticking and st.position.get(t, {}).get(p, 0) <= o:
                self.ticker.ask(t, p, since)

    def _tick_producer(self) -> Any:
        from confluent_kafka import Producer

        # every delivery reported: a tick's offset is a staleness read's position
        return Producer({**logged(self.settings.kafka()), "linger.ms": 0})

    async def recent_input(self, view: str, within_s: float, wait_s: float,
                           field: str = "max_staleness_ms") -> list[Token]:
        """A position covering every input record of ``view`` appended more than
        ``within_s`` before now: per input partition, a tick this node wrote since then
        (``Ticker.recent``), waiting up to ``wait_s`` for new ones to be delivered.
        Raises ``BadRequest`` naming ``field`` (what needs the ticks) for a view without
        ticks, ``NotUpToBound`` past the wait."""
        topics = sorted(self.tick_topics.get(view, ()))
        if not topics:
            raise BadRequest(f"view {view!r} has no ticks (a windowed view, or not in "
                             f"real-time mode): {field} needs them; a position bounds "
                             "its reads at a batch's end", field=field)
        since = time.monotonic() - within_s
        deadline = time.monotonic() + wait_s
        tokens: dict[tuple[str, int], int] = {}
        pending = topics
        while True:
            missing: list[str] = []
            for topic in pending:
                try:
                    found, lacking = await asyncio.to_thread(self.ticker.recent, topic, since)
                except LookupError as exc:
                    raise NotUpToBound(f"{self.endpoint} cannot tick {topic!r}: {exc}",
                                       served_by=self.endpoint) from None
                tokens.update(((t, p), o) for t, p, o in found)
                if lacking:
                    missing.append(topic)
            if not missing:
                return [(t, p, o) for (t, p), o in sorted(tokens.items())]
            if time.monotonic() >= deadline:
                raise NotUpToBound(f"{self.endpoint}: no tick delivered to {missing} within "
                                   f"{wait_s:.3f}s", served_by=self.endpoint)
            await asyncio.sleep(0.002)
            self.ticker.poll()
            pending = missing

    def settled_cut(self, view: str, fresh_s: float = SETTLED_S) -> list[Token] | None:
        """A cut of ``view``'s input that every partition of it this node holds (restored)
        already reflects, when it covers a tick written within ``fresh_s``: per input
        partition, the least of their positions. None when there is none (the caller
        ticks now and waits). A tick is asked where the newest is older than
        :data:`REFRESH_S`, so that the next reads find a fresh one."""
        topics = sorted(self.tick_topics.get(view, ()))
        states = [st for (v, _), st in list(self.materializer.states.items())
                  if v == view and st.restored]
        if not topics or not states:
            return None
        now = time.monotonic()
        cut: list[Token] = []
        for topic in topics:
            n = self.ticker.known_partitions(topic)
            if n is None:
                return None
            for p in range(n):
                self.ticker.ask(topic, p, now - REFRESH_S)
                tick = self.ticker.oldest_since(topic, p, now - fresh_s)
                reflected = min(st.position.get(topic, {}).get(p, 0) for st in states) - 1
                if tick is None or reflected < tick:
                    return None
                cut.append((topic, p, reflected))
        return cut

    async def input_ends(self, view: str) -> dict[tuple[str, int], int]:
        """The end offsets of ``view``'s ticked input partitions, asked of Kafka now;
        ``NotUpToBound`` if it cannot be asked."""
        topics = sorted(self.tick_topics.get(view, ()))

        def ask() -> dict[tuple[str, int], int]:
            tps = [(t, p) for t in topics for p in range(self.ticker.partitions(t))]
            return self.materializer.ends.now(tps)

        try:
            return await asyncio.to_thread(ask)
        except Exception as exc:  # LookupError, KafkaException: Kafka did not answer
            raise NotUpToBound(f"{self.endpoint} cannot read {view}'s input ends: {exc}",
                               served_by=self.endpoint) from None

    def _reflects(self, view: str, partition: int, tokens: list[Token],
                  key: bytes | None) -> bool:
        st = self.materializer.states.get((view, partition))
        if st is None:
            return False
        return row_reflects(st.rows.get(key) if key is not None else None, st.position,
                            tokens)

    def topic_skips(self) -> dict[str, Skips]:
        """Records skipped per reason, per topic read besides the changelogs
        (streamiq_topic_records_skipped, /health's skip_reasons)."""
        return {"membership": self.membership.skips, "catalog": self.discovery.skips,
                **self.reads}

    def health(self) -> dict[str, Any]:
        """Supervision counters: exceptions caught per part, parts restarting now, the
        part that could not recover, and records skipped because they could not be read."""
        sup = self.supervisor
        return {"faults": dict(sup.faults), "down": sorted(sup.down), "failed": sup.failed,
                "skipped_records": {
                    "membership": self.membership.skipped,
                    "changelog": self.materializer.skipped,
                    "catalog": self.discovery.skipped},
                "skip_reasons": {t: dict(s.reasons) for t, s in self.topic_skips().items()},
                # views whose newest description on the catalog is refused, and why
                "refused_views": dict(self.discovery.refused)}

    def freshness(self) -> dict[str, dict[str, Any]]:
        """Write to stored per view, since this node started (rows that carry their
        input time): count, p50 and p99 in seconds, and the histogram (bucket bounds and
        counts, +Inf last) for whoever merges several nodes' or windows their own; and
        the same per stage (``stages``: pipeline, node; ``Materializer.stages``)."""
        f, stages = self.materializer.freshness, self.materializer.stages
        out: dict[str, dict[str, Any]] = {}
        for key, counts in list(f.counts.items()):
            out[key[0]] = {**_histogram(f, key, counts), "stages": {}}
        for key, counts in list(stages.counts.items()):
            if key[0] in out:
                out[key[0]]["stages"][key[1]] = _histogram(stages, key, counts)
        return out

    def describe(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "ready": self.ready(), "app": self.app.name,
                "views": sorted(self.views), "partitions": self.report(),
                "positions": self.positions(),
                "ticks": {"written": self.ticker.written, "failed": self.ticker.failed},
                "freshness": self.freshness(), "restoring": self.restoring(),
                **self.health()}

    def restoring(self) -> dict[str, dict[int, RestoreProgress | CopyProgress]]:
        """Per view, the partitions this node is restoring and how far each has come:
        copying from a peer (``Transfer.progress``) or replaying in a process of its own
        (``Replaying.progress``), then from the changelog
        (``PartitionState.restore_progress``)."""
        out: dict[str, dict[int, RestoreProgress | CopyProgress]] = {}
        now = time.monotonic()
        for (view, p), t in list(self.transfers.items()):
            out.setdefault(view, {})[p] = t.progress(now)
        for (view, p), st in sorted(self.materializer.holding().items()):
            progress = st.restore_progress(now)
            if progress is not None:
                out.setdefault(view, {})[p] = progress
        return out


def _histogram(lat: Latency, key: tuple[str, ...], counts: list[int]) -> dict[str, Any]:
    return {"count": sum(counts), "p50": lat.quantile(0.5, [key]),
            "p99": lat.quantile(0.99, [key]), "buckets": list(lat.buckets),
            "counts": list(counts)}
