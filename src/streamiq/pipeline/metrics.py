"""The pipeline's Prometheus metrics, on an HTTP port of its own (``--metrics-port``).

Fed by the pipeline's StreamingQueryListener (``runner.py``): one update per
micro-batch that read input, per view. Served by ``prometheus_client``'s HTTP server
on a daemon thread; a port already in use is a warning, not a failed pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streamiq.metrics import Latency

__all__ = ["PipelineStats"]

log = logging.getLogger("streamiq.pipeline")

#: seconds: a warm micro-batch takes ~0.5-1 s here, a cold or large one tens
_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(eq=False)  # registered with prometheus_client: hashed by identity
class PipelineStats:
    records: dict[str, int] = field(default_factory=dict)  # view -> input records
    dead_letters: dict[str, int] = field(default_factory=dict)  # view -> invalid records
    restarts: dict[str, int] = field(default_factory=dict)  # view -> query restarts
    #: (view, reason class) -> dead letters written (deadletter_record.reason_class)
    reasons: dict[tuple[str, str], int] = field(default_factory=dict)
    input_rate: dict[str, float] = field(default_factory=dict)  # last batch, records/s
    process_rate: dict[str, float] = field(default_factory=dict)
    last_ms: dict[str, int] = field(default_factory=dict)  # last batch's duration
    durations: Latency = field(default_factory=lambda: Latency(("view",), _BATCH_BUCKETS))

    def batch(self, view: str, ev: dict[str, Any], count_input: bool = True) -> None:
        """One batch's progress (the listener's event); its input counted unless
        ``count_input`` is False (real-time mode: ``read`` counts it as it is read)."""
        if count_input:
            self.read(view, int(ev.get("records", 0)))
        self.dead_letters[view] = self.dead_letters.get(view, 0) + int(ev.get("bad", 0))
        self.input_rate[view] = float(ev.get("input_rate") or 0.0)
        self.process_rate[view] = float(ev.get("process_rate") or 0.0)
        self.last_ms[view] = int(ev.get("duration_ms") or 0)
        self.durations.observe((view,), self.last_ms[view] / 1000)

    def read(self, view: str, n: int) -> None:
        """``n`` more input records of ``view`` read."""
        self.records[view] = self.records.get(view, 0) + n

    def progress(self, view: str) -> dict[str, Any]:
        """What the dashboards show of a view (``pipeline/progress.py`` publishes it)."""
        last = self.durations.counts.get((view,))
        return {"batches": sum(last) if last else 0, "records": self.records.get(view, 0),
                "dead_letters": self.dead_letters.get(view, 0),
                "restarts": self.restarts.get(view, 0),
                "input_rate": self.input_rate.get(view, 0.0),
                "process_rate": self.process_rate.get(view, 0.0),
                "duration_ms": self.last_ms.get(view, 0)}

    def invalid(self, view: str, n: int) -> None:
        """``n`` more invalid input records of ``view`` (dead-lettered)."""
        self.dead_letters[view] = self.dead_letters.get(view, 0) + n

    def dead_lettered(self, view: str, reasons: Mapping[str, int]) -> None:
        """The dead letters written for ``view`` so far, by reason class."""
        for reason, n in reasons.items():
            self.reasons[(view, reason)] = n

    def restarted(self, view: str) -> None:
        self.restarts[view] = self.restarts.get(view, 0) + 1

    def collect(self) -> Iterator[Metric]:
        yield self.durations.family("streamiq_pipeline_batch_duration_seconds",
                                    "Micro-batches that read input, by view")
        for name, doc, values, kind in (
                ("streamiq_pipeline_input_records", "Input records read", self.records,
                 CounterMetricFamily),
                ("streamiq_pipeline_dead_letters", "Invalid input records (dead-lettered)",
                 self.dead_letters, CounterMetricFamily),
                ("streamiq_pipeline_query_restarts", "Queries restarted from their checkpoint",
                 self.restarts, CounterMetricFamily),
                ("streamiq_pipeline_input_rate", "Input records per second, last batch",
                 self.input_rate, GaugeMetricFamily),
                ("streamiq_pipeline_processing_rate",
                 "Records processed per second, last batch", self.process_rate,
                 GaugeMetricFamily)):
            fam = kind(name, doc, labels=["view"])
            for view, v in sorted(values.items()):
                fam.add_metric([view], v)
            yield fam
        fam = CounterMetricFamily("streamiq_pipeline_dead_letters_written",
                                  "Dead letters written, by view and reason",
                                  labels=["view", "reason"])
        for (view, reason), n in sorted(self.reasons.items()):
            fam.add_metric([view, reason], n)
        yield fam

    def serve(self, host: str, port: int) -> Any:
        """Serve ``/metrics`` on ``host:port`` (a daemon thread): the server (its
        ``shutdown()`` stops it), or None when the port cannot be bound."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        ProcessCollector(registry=registry)
        try:
            server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            log.warning("pipeline metrics not served on %s:%d: %s", host, port, exc)
            return None
        log.info("pipeline metrics at http://%s:%d/metrics", host, port)
        return server
