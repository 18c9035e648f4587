"""The pipeline's metrics: fed per micro-batch, served on a port of its own."""

from __future__ import annotations

import socket

import httpx
from procs import free_port
from prometheus_client.parser import text_string_to_metric_families

from streamiq.pipeline.metrics import PipelineStats


def test_batches_feed_counters_rates_and_durations_served_over_http() -> None:
    stats = PipelineStats()
    stats.batch("balances", {"records": 10, "bad": 2, "duration_ms": 800,
                             "input_rate": 12.5, "process_rate": 40.0})
    stats.batch("balances", {"records": 5, "bad": 0, "duration_ms": 300,
                             "input_rate": 3.0, "process_rate": 20.0})
    stats.restarted("balances")
    port = free_port()
    server = stats.serve("127.0.0.1", port)
    assert server is not None
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        server.shutdown()
    got = {(s.name, s.labels.get("le")): s.value
           for f in text_string_to_metric_families(text) for s in f.samples
           if s.labels.get("view") == "balances"}
    assert got[("streamiq_pipeline_input_records_total", None)] == 15
    assert got[("streamiq_pipeline_dead_letters_total", None)] == 2
    assert got[("streamiq_pipeline_query_restarts_total", None)] == 1
    assert got[("streamiq_pipeline_input_rate", None)] == 3.0  # the last batch's
    assert got[("streamiq_pipeline_processing_rate", None)] == 20.0
    assert got[("streamiq_pipeline_batch_duration_seconds_count", None)] == 2
    assert got[("streamiq_pipeline_batch_duration_seconds_bucket", "0.5")] == 1
    assert got[("streamiq_pipeline_batch_duration_seconds_sum", None)] == 1.1


def test_a_port_in_use_is_a_warning_not_a_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert PipelineStats().serve("127.0.0.1", s.getsockname()[1]) is None


def test_dead_letters_written_are_counted_by_reason() -> None:
    stats = PipelineStats()
    stats.dead_lettered("balances", {"null value": 2, "wrong type for field(s)": 1})
    stats.dead_lettered("balances", {"null value": 3, "wrong type for field(s)": 1})
    samples = {(s.labels["view"], s.labels["reason"]): s.value
               for f in stats.collect() for s in f.samples
               if s.name == "streamiq_pipeline_dead_letters_written_total"}
    assert samples == {("balances", "null value"): 3,
                       ("balances", "wrong type for field(s)"): 1}
