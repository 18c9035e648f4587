"""Prometheus metrics shared by every part: a cheap latency recorder and the exposition.

Each part (node, ingest, pipeline) keeps what it counts in plain Python numbers and
exposes it through a ``prometheus_client`` custom collector that reads them at scrape
time, so the hot path never takes a lock or builds a label set. The one thing recorded
per request is its latency, by :class:`Latency`: a bisect into fixed buckets and two
additions (measured against metrics off by ``bench/bench_queries.py --metrics``).

Names follow Prometheus conventions: ``streamiq_`` prefix, base units (seconds, bytes),
``_total`` on counters. Served at ``GET /metrics`` (nodes, ingest) and on the
pipeline's ``--metrics-port``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["BUCKETS", "CONTENT_TYPE", "Latency", "exposition"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: seconds: a local lookup takes ~0.1 ms, a scatter-gather tens of ms, a wait seconds
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
           0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Latency:
    """Latency histograms keyed by a tuple of label values, e.g. ("lookup", "local")."""

    __slots__ = ("buckets", "counts", "labels", "sums")

    def __init__(self, labels: tuple[str, ...], buckets: tuple[float, ...] = BUCKETS) -> None:
        self.labels = labels
        self.buckets = buckets
        self.counts: dict[tuple[str, ...], list[int]] = {}  # per bucket, +Inf last
        self.sums: dict[tuple[str, ...], float] = {}

    def observe(self, key: tuple[str, ...], seconds: float) -> None:
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0] * (len(self.buckets) + 1)
            self.sums[key] = 0.0
        counts[bisect_left(self.buckets, seconds)] += 1
        self.sums[key] += seconds

    def count(self, key: tuple[str, ...]) -> int:
        return sum(self.counts.get(key, ()))

    def quantile(self, q: float, keys: Iterable[tuple[str, ...]] | None = None) -> float | None:
        """The ``q`` quantile over ``keys`` (all when None), as Prometheus'
        ``histogram_quantile`` estimates it (linear within the bucket); None when empty."""
        chosen = list(self.counts) if keys is None else [k for k in keys if k in self.counts]
        merged = [sum(self.counts[k][i] for k in chosen) for i in range(len(self.buckets) + 1)]
        total = sum(merged)
        if not total:
            return None
        rank, seen = q * total, 0
        for i, n in enumerate(merged):
            if seen + n >= rank and n:
                lo = self.buckets[i - 1] if i else 0.0
                hi = self.buckets[i] if i < len(self.buckets) else self.buckets[-1]
                return lo + (hi - lo) * (rank - seen) / n
            seen += n
        return self.buckets[-1]

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=list(self.labels))
        for key, counts in list(self.counts.items()):
            cumulative, running = [], 0
            for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
                running += n
                cumulative.append((_bound(bound), running))
            fam.add_metric(list(key), cumulative, self.sums[key])
        return fam


def _bound(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(b)


class _Collector:
    def __init__(self, collect: Callable[[], Iterator[Metric]]) -> None:
        self.collect = collect


def exposition(collect: Callable[[], Iterator[Metric]]) -> Callable[[], bytes]:
    """A function rendering what ``collect`` yields, and the process' CPU and memory
    (``process_*``), in the Prometheus text format (a registry of its own: nothing
    registered globally by a library leaks in)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(collect))
    ProcessCollector(registry=registry)

    def render() -> bytes:
        return bytes(generate_latest(registry))

    return render
