"""librdkafka's lines go through Python logging, one per kind per interval."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Consumer
from procs import free_port

from streamiq.kafka import clientlog
from streamiq.kafka.clientlog import LOGGER, logged


def _fail(n: int) -> None:
    for _ in range(n):  # as confluent-kafka calls it: facility, client name, message
        LOGGER.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                   "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed")


def _fresh_filter(monkeypatch: pytest.MonkeyPatch, interval: float) -> None:
    """A filter of its own (the module's remembers what other tests logged)."""
    monkeypatch.setattr(LOGGER, "filters", [clientlog._OncePerInterval(interval)])


def test_repeats_of_a_kind_are_held_back_and_counted(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    _fresh_filter(monkeypatch, 0.5)
    with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
        _fail(50)
        LOGGER.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1", "x")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(caplog.records) < 3:
            _fail(1)  # until the interval has passed: that line names the held ones
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("FAIL [rdkafka#consumer-1]")
    assert lines[1].startswith("REQTMOUT")  # another kind is not held by FAIL's
    assert "more such lines since the last" in lines[2]
    held = int(lines[2].rsplit("(and ", 1)[1].split()[0])
    assert held >= 49


def test_a_real_client_with_no_broker_logs_a_line_not_a_flood(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka retries a refused connection about ten times a second; through the
    logger a 3 s outage is one line per kind, in Python logging (not on stderr)."""
    _fresh_filter(monkeypatch, clientlog.INTERVAL_S)
    nothing = free_port()  # a port nothing listens on
    c = Consumer(logged({"bootstrap.servers": f"127.0.0.1:{nothing}", "group.id": "g"}))
    with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
        c.subscribe(["t"])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            c.poll(0.2)
        c.close()
    fails = [r for r in caplog.records if "Connection refused" in r.getMessage()]
    assert len(fails) == 1, [r.getMessage() for r in caplog.records]
    assert fails[0].levelno == logging.ERROR and fails[0].name == "streamiq.kafka.client"


def test_a_client_polled_now_and_then_hands_its_lines_over_as_they_come(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A producer used once a batch is polled by serve_logs: a refused connection is
    logged while it happens, not at the producer's next flush (which, in up's clean stop,
    printed a broker restart's refusal long after it was over)."""
    from confluent_kafka import Producer

    _fresh_filter(monkeypatch, clientlog.INTERVAL_S)

    class Owner:
        def __init__(self) -> None:
            self.producer: Producer | None = Producer(
                logged({"bootstrap.servers": f"127.0.0.1:{free_port()}"}))
            clientlog.serve_logs(self.poll)

        def poll(self) -> None:
            if self.producer is not None:
                self.producer.poll(0)

    with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
        owner = Owner()  # never polled by its own code
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                "Connection refused" in r.getMessage() for r in caplog.records):
            time.sleep(0.1)
        owner.producer = None  # closed, as its owner does when it stops
    assert any("Connection refused" in r.getMessage() for r in caplog.records)
