"""A node's Prometheus metrics (``GET /metrics``): what it answered and what it holds.

Per request, only the latency is recorded (``streamiq.metrics.Latency``), labelled by
query type and by how it was served:

- ``local``: a key lookup or window fetch answered from this node's store;
- ``forwarded``: one hop to the owner, relayed;
- ``fanout``: a scatter-gather (multi-get, scan, aggregate) coordinated here;
- ``peer``: another node's part of a scatter-gather, asked here over the peer protocol
  (counted once cluster-wide as the entry node's ``fanout``; kept apart so sums over
  nodes stay exact; recorded by ``serving/peer/server.py``). A peer's key lookup is
  not recorded on the owner: the entry's ``forwarded`` holds its whole time.

Labels come from the route table (``serving/routes.py``). The lean path's answers are
recorded by the node's HTTP protocol (``protocol.py``),
everything else by :class:`Timed` around the FastAPI app. Everything else here is read
from the node's parts when scraped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streamiq.metrics import Latency, exposition
from streamiq.serving.http.answers import HOPS
from streamiq.serving.routes import FANOUT, query_of

if TYPE_CHECKING:
    from streamiq.serving.node import Node

__all__ = ["LABELS", "Timed", "node_metrics", "query_of", "served_of"]

LABELS = ("query", "served")
_HOPS = HOPS.encode()
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def served_of(query: str, answer_headers: Any) -> str:
    """How a client's query was served, from the answer's headers (hops)."""
    if query in FANOUT:
        return "fanout"
    for k, v in answer_headers:
        if k == _HOPS:
            return "local" if v == b"0" else "forwarded"
    return "local"


class Timed:
    """ASGI wrapper recording the latency of the queries the full app answers."""

    def __init__(self, app: Callable[..., Awaitable[None]], latency: Latency) -> None:
        self.app = app
        self.latency = latency

    def __getattr__(self, name: str) -> Any:  # .state, .routes...: the app's
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        query = query_of(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if query is None:
            await self.app(scope, receive, send)
            return
        t0 = perf_counter()
        answered: list[Any] = []

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.extend(message.get("headers", ()))
            elif not message.get("more_body", False):  # recorded before the last bytes go
                self.latency.observe((query, served_of(query, answered)),
                                     perf_counter() - t0)
            await send(message)

        await self.app(scope, receive, timed_send)


def node_metrics(node: Node, *parts: Callable[[], Iterator[Metric]]
                 ) -> Callable[[], bytes]:
    """The ``/metrics`` document of a node: its stores, partitions and health, and each
    of ``parts``' metrics (the cluster's traffic, ``cluster/metrics.py``)."""

    def collect() -> Iterator[Metric]:
        for part in parts:
            yield from part()
        yield from _stores(node)
        yield from _partitions(node)
        yield from _health(node)
        for more in getattr(node, "collectors", ()):  # the SQL port's (a test's fake: none)
            yield from more()

    return exposition(collect)


def _stores(node: Node) -> Iterator[Metric]:
    rows = GaugeMetricFamily("streamiq_store_rows", "Rows in the view's store (estimate)",
                             labels=["view"])
    size = GaugeMetricFamily("streamiq_store_bytes", "Bytes of the view's store (SST files "
                             "and memtables)", labels=["view"])
    memory = GaugeMetricFamily("streamiq_store_memory_bytes", "Memory the view's store "
                               "takes (RocksDB: its block cache's use, memtables and table "
                               "readers; within --store-memory-mb)", labels=["view"])
    for view, store in sorted(node.stores.items()):
        stats = store.stats()
        rows.add_metric([view], stats["rows"])
        size.add_metric([view], stats["bytes"])
        memory.add_metric([view], stats.get("memory", 0))
    yield rows
    yield size
    yield memory


def _partitions(node: Node) -> Iterator[Metric]:
    labels = ["view", "partition"]
    lag = GaugeMetricFamily("streamiq_changelog_lag_records",
                            "Changelog records not yet applied, per held partition", labels=labels)
    offset = GaugeMetricFamily("streamiq_changelog_offset",
                               "Next changelog offset to apply, per held partition", labels=labels)
    progress = GaugeMetricFamily("streamiq_restore_progress_ratio",
                                 "Share of the changelog restored (1 once restored)", labels=labels)
    versions = GaugeMetricFamily("streamiq_cut_versions", "Versions kept for consistent "
                                 "reads (recent rows of lately changed keys), per held "
                                 "partition; none at rest", labels=labels)
    version_bytes = GaugeMetricFamily("streamiq_cut_version_bytes", "Bytes of the keys and "
                                      "values of those versions (memory only)", labels=labels)
    for (view, p), st in sorted(node.materializer.holding().items()):
        key = [view, str(p)]
        lag.add_metric(key, max(st.lag, 0))
        offset.add_metric(key, st.offset)
        done = 1.0 if st.restored or st.target <= 0 else min(st.offset / st.target, 1.0)
        progress.add_metric(key, done)
        if st.history is not None:
            versions.add_metric(key, st.history.size)
            version_bytes.add_metric(key, st.history.nbytes)
    yield from (lag, offset, progress, versions, version_bytes)
    read = CounterMetricFamily("streamiq_changelog_records_read",
                               "Changelog records fetched since the node started",
                               labels=["view"])
    for view, n in sorted(node.materializer.read.items()):
        read.add_metric([view], n)
    yield read
    skipped = CounterMetricFamily("streamiq_changelog_records_skipped",
                                  "Changelog records not applied (not a row of the view, or "
                                  "a marker claiming what cannot be), by reason",
                                  labels=["view", "reason"])
    for (view, reason), n in sorted(node.materializer.skips.items()):
        skipped.add_metric([view, reason], n)
    yield skipped
    yield node.materializer.freshness.family(
        "streamiq_view_freshness_seconds",
        "Write to stored: an input record's timestamp to its row stored on this node, per "
        "view (rows that carry their input time, once their partition is restored)")
    yield node.materializer.stages.family(
        "streamiq_view_stage_seconds",
        "The same rows' time by stage: pipeline (input record's timestamp to its changelog "
        "record's: Spark's sink producing the row), node (changelog record's timestamp to "
        "stored on this node)")


def _health(node: Node) -> Iterator[Metric]:
    yield GaugeMetricFamily("streamiq_node_ready", "1 when the node holds and has restored "
                            "every partition it should", value=int(node.ready()))
    yield CounterMetricFamily("streamiq_membership_changes",
                              "Times the set of live members changed", value=node.router.changes)
    health = node.health()
    skipped = CounterMetricFamily("streamiq_skipped_records",
                                  "Records skipped because they could not be read",
                                  labels=["topic"])
    for topic, n in sorted(health["skipped_records"].items()):
        skipped.add_metric([topic], n)
    yield skipped
    reasons = CounterMetricFamily("streamiq_topic_records_skipped",
                                  "Records of the members, catalog and progress topics not "
                                  "used, by reason", labels=["topic", "reason"])
    for topic, skips in sorted(node.topic_skips().items()):
        for reason, n in sorted(skips.reasons.items()):
            reasons.add_metric([topic, reason], n)
    yield reasons
    restarts = CounterMetricFamily("streamiq_part_restarts",
                                   "Background parts that failed and were restarted",
                                   labels=["part"])
    for part, n in sorted(health["faults"].items()):
        restarts.add_metric([part], n)
    yield restarts
