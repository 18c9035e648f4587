"""The latency recorder and its Prometheus exposition."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from streamiq.metrics import BUCKETS, Latency, exposition


def test_observations_land_in_their_bucket_and_sum() -> None:
    lat = Latency(("query", "served"))
    for s in (0.00005, 0.0001, 0.0003, 20.0):
        lat.observe(("lookup", "local"), s)
    counts = lat.counts[("lookup", "local")]
    assert counts[0] == 2  # le 0.0001 (inclusive, as Prometheus buckets are)
    assert counts[BUCKETS.index(0.0005)] == 1 and counts[-1] == 1  # +Inf
    assert lat.count(("lookup", "local")) == 4 and lat.count(("scan", "fanout")) == 0
    assert abs(lat.sums[("lookup", "local")] - 20.00045) < 1e-9


def test_quantiles_interpolate_within_buckets_like_histogram_quantile() -> None:
    lat = Latency(("k",))
    assert lat.quantile(0.5) is None
    for _ in range(100):
        lat.observe(("a",), 0.0002)  # (0.0001, 0.00025]
    lat.observe(("b",), 3.0)  # (2.5, 5]
    p50 = lat.quantile(0.5)
    assert p50 is not None and 0.0001 < p50 <= 0.00025
    p999 = lat.quantile(0.999)
    assert p999 is not None and 2.5 < p999 <= 5.0
    only_b = lat.quantile(0.5, [("b",)])
    assert only_b is not None and 2.5 < only_b <= 5.0


def test_exposition_is_valid_prometheus_text_with_cumulative_buckets() -> None:
    lat = Latency(("query", "served"))
    lat.observe(("lookup", "local"), 0.0003)
    lat.observe(("lookup", "local"), 0.002)

    def collect() -> Iterator[Metric]:
        yield lat.family("streamiq_request_duration_seconds", "doc")
        yield CounterMetricFamily("streamiq_things", "doc", value=3)

    families = {f.name: f for f in text_string_to_metric_families(
        exposition(collect)().decode())}
    hist = families["streamiq_request_duration_seconds"]
    assert hist.type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in hist.samples}
    assert samples[("streamiq_request_duration_seconds_count", None)] == 2
    assert samples[("streamiq_request_duration_seconds_bucket", "0.0005")] == 1
    assert samples[("streamiq_request_duration_seconds_bucket", "+Inf")] == 2
    assert families["streamiq_things"].samples[0].name == "streamiq_things_total"
    assert "process_resident_memory_bytes" in {s.name for f in families.values()
                                               for s in f.samples}
