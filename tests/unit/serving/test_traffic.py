"""Answers are counted, not logged one line each; a period's summary is one line."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from test_fastpath import call

from streamiq.serving.traffic import Traffic, log_summaries


async def test_lookups_are_counted_without_a_log_line_each(
        app: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    traffic = app.deps.coordinator.traffic
    for _ in range(5):
        assert (await call(app, "/account/a1", forwarded=False))[0] == 200  # lean path
    assert (await call(app, "/account/a1", forwarded=False, query=b"wait_ms=1"))[0] == 200
    assert (await call(app, "/account/a1", forwarded=True))[0] == 200
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


async def test_summary_task_logs_one_line_per_busy_period(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamiq.traffic")
    t = Traffic()
    task = asyncio.create_task(log_summaries(t, 0.05))

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "streamiq.traffic"]

    await asyncio.sleep(0.12)  # idle periods: no line
    assert lines() == []
    t.local += 1
    for _ in range(500):  # bounded wait for the next period
        if lines():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.12)  # more idle periods: still one line
    task.cancel()
    assert len(lines()) == 1 and "1 local" in lines()[0]
