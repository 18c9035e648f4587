"""The ingest service's Prometheus metrics (``GET /metrics``): writes acknowledged per
topic (and how many of them the lean path answered), refused (those refused before they
were read whole also by reason), failed, and the latency of each write route."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from streamiq.metrics import Latency, exposition
from streamiq.serving.http.http_limits import Refusals

__all__ = ["IngestCounters", "Timed"]

Message = MutableMapping[str, Any]


@dataclass
class IngestCounters:
    written: dict[str, int] = field(default_factory=dict)  # topic -> acknowledged writes
    refused: int = 0  # write requests the app answered 4xx (bad input, no or wrong token)
    unread: Refusals = field(default_factory=Refusals)  # refused by the protocol, by reason
    failed: int = 0  # writes the broker did not acknowledge (503)
    lean: int = 0  # acknowledged writes answered on the lean path (ingest/lean.py)
    latency: Latency = field(default_factory=lambda: Latency(("route", "code")))

    def render(self) -> Callable[[], bytes]:
        return exposition(self.collect)

    def collect(self) -> Iterator[Metric]:
        yield self.latency.family("streamiq_ingest_request_duration_seconds",
                                  "Write requests, by route and HTTP status class")
        written = CounterMetricFamily("streamiq_ingest_records",
                                      "Records acknowledged by the broker", labels=["topic"])
        for topic, n in sorted(self.written.items()):
            written.add_metric([topic], n)
        yield written
        unread = CounterMetricFamily(
            "streamiq_ingest_refused_unread", "Requests refused before they were read "
            "whole (no token, too large, too slow), by reason", labels=["reason"])
        for reason, n in sorted(self.unread.counts.items()):
            unread.add_metric([reason], n)
        yield unread
        yield CounterMetricFamily("streamiq_ingest_refused", "Write requests refused with a "
                                  "4xx", value=self.refused + sum(self.unread.counts.values()))
        yield CounterMetricFamily("streamiq_ingest_lean_answered", "Acknowledged writes "
                                  "answered on the lean path (no ASGI)", value=self.lean)
        yield CounterMetricFamily("streamiq_ingest_failed",
                                  "Writes the broker did not acknowledge", value=self.failed)


class Timed:
    """ASGI wrapper timing POSTs (the write routes) and counting refusals."""

    def __init__(self, app: Callable[..., Awaitable[None]], counters: IngestCounters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: MutableMapping[str, Any],
                       receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in ("/orders", "/transfer") else "/account/{account}"
        t0, status = perf_counter(), [500]

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif not message.get("more_body", False):
                code = f"{status[0] // 100}xx"
                self.counters.latency.observe((route, code), perf_counter() - t0)
                if 400 <= status[0] < 500:
                    self.counters.refused += 1
            await send(message)

        await self.app(scope, receive, timed_send)
