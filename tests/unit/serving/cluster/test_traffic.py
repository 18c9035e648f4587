"""Answers are counted, not logged one line each; a period's summary is one line."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from nodeapp import call, peer_lookup
from waits import until

from streamiq.serving.cluster.traffic import Traffic, log_summaries


async def test_lookups_are_counted_without_a_log_line_each(
        app: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    traffic = app.deps.coordinator.traffic
    for _ in range(5):
        assert (await call(app, "/account/a1"))[0] == 200  # lean path
    assert (await call(app, "/account/a1", query=b"wait_ms=1"))[0] == 200
    assert peer_lookup(app, "a1")[0] == 200  # a peer's, over the peer protocol
    assert traffic.local == 6 and traffic.for_peers == 1
    assert not [r for r in caplog.records if r.levelno >= logging.INFO
                and r.name.startswith("streamiq")], "a log line per request"


def test_summary_names_what_changed_since_the_last_period() -> None:
    t = Traffic()
    before = t.copy()
    assert t.summary_since(before, 60) is None  # nothing answered: no line
    t.local += 3
    t.forwarded_to("h:2")
    t.forwarded_to("h:2")
    t.fanout += 1
    line = t.summary_since(before, 60)
    assert line == ("last 60s: 6 answers: 3 local, 2 forwarded (h:2 2), 1 fan-out, "
                    "0 unavailable; 0 answered for peers")
    assert t.summary_since(t.copy(), 60) is None
    assert t.totals()["forwarded"] == 2


class Periods(Traffic):
    """Traffic that counts the periods the summary task has closed (it takes a copy of
    the counts when it starts and at the end of each period)."""

    copies = 0

    def copy(self) -> Traffic:
        self.copies += 1
        return super().copy()


async def test_summary_task_logs_one_line_per_busy_period(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamiq.traffic")
    t = Periods()
    task = asyncio.create_task(log_summaries(t, 0.01))

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "streamiq.traffic"]

    await until(lambda: t.copies >= 3, "two idle periods")
    assert lines() == []  # idle periods: no line
    t.local += 1
    await until(lines, "the busy period's line")
    closed = t.copies
    await until(lambda: t.copies >= closed + 2, "two more idle periods")
    task.cancel()
    assert len(lines()) == 1 and "1 local" in lines()[0]  # still one line


def test_latencies_per_way_served_for_dashboards() -> None:
    from streamiq.metrics import Latency
    from streamiq.serving.http.metrics import LABELS

    assert Traffic().latencies() == {}  # metrics off
    latency = Latency(LABELS)
    t = Traffic(latency=latency)
    for _ in range(99):
        latency.observe(("lookup", "local"), 0.0002)  # in (0.0001, 0.00025]
    latency.observe(("scan", "local"), 0.2)  # windows/scan merged into "local" too
    latency.observe(("lookup", "forwarded"), 0.003)
    latency.observe(("lookup", "peer"), 9.0)  # another node's query: not shown
    got = t.latencies()
    assert set(got) == {"local", "forwarded", "fanout"}
    assert got["local"]["count"] == 100
    assert 0.0001 < got["local"]["p50"] <= 0.00025  # type: ignore[operator]
    assert got["local"]["p99"] == pytest.approx(0.00025)  # the 99th of 100: top of its bucket
    assert got["forwarded"] == {"count": 1, "p50": pytest.approx(0.00375),
                                "p99": pytest.approx(0.004975)}
    assert got["fanout"] == {"count": 0, "p50": None, "p99": None}
    assert set(t.latencies((0.999,))["local"]) == {"count", "p99.9"}
