"""Prometheus metrics through real processes: three nodes, the ingest and the pipeline.

A known workload (N writes through ingest, two invalid records straight to the input
topic, M lookups on one node) is counted exactly where it happened, and every family
docs/operations.md lists is there on the part that owns it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from procs import HTTP, SHORT_BATCHES
from prometheus_client.parser import text_string_to_metric_families

from streamiq.views.bank import BALANCES, TOPIC

pytestmark = pytest.mark.integration

NODE_FAMILIES = {"streamiq_request_duration_seconds", "streamiq_forwarded_answers",
                 "streamiq_unavailable_answers", "streamiq_peer_replies", "streamiq_store_rows",
                 "streamiq_store_bytes", "streamiq_changelog_lag_records",
                 "streamiq_changelog_offset", "streamiq_restore_progress_ratio",
                 "streamiq_node_ready", "streamiq_membership_changes",
                 "streamiq_skipped_records", "streamiq_part_restarts",
                 "process_resident_memory_bytes"}
INGEST_FAMILIES = {"streamiq_ingest_request_duration_seconds", "streamiq_ingest_records",
                   "streamiq_ingest_refused", "streamiq_ingest_failed"}
PIPELINE_FAMILIES = {"streamiq_pipeline_batch_duration_seconds",
                     "streamiq_pipeline_input_records", "streamiq_pipeline_dead_letters",
                     "streamiq_pipeline_query_restarts", "streamiq_pipeline_input_rate",
                     "streamiq_pipeline_processing_rate"}


def scrape(port: int) -> dict[str, Any]:
    """family name -> {(sample name, sorted labels): value}."""
    text = HTTP.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)}


def lookups(doc: dict[str, Any]) -> dict[str, float]:
    """Lookups counted, by how served."""
    out: dict[str, float] = {}
    for (name, labels), v in doc["streamiq_request_duration_seconds"].items():
        lab = dict(labels)
        if name.endswith("_count") and lab["query"] == "lookup":
            out[lab["served"]] = out.get(lab["served"], 0) + v
    return out


def applied(port: int) -> dict[int, float]:
    """changelog partition -> next offset the node applies, for each partition it holds."""
    return {int(dict(labels)["partition"]): v for (_, labels), v in
            scrape(port)["streamiq_changelog_offset"].items()}


def changelog_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end (high watermark)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamiq-test-ends"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        c.close()


def test_each_part_counts_a_known_workload_exactly(cluster: Any) -> None:
    pipe = cluster.pipeline("bank", extra=SHORT_BATCHES, wait=False)
    # ready while the others start; batches end every 10 s (their metrics)
    ingest, _ = cluster.ingest("bank")
    nodes = [p for p, _ in cluster.nodes(3, "bank")]
    accounts = [f"m{i}" for i in range(20)]
    with httpx.Client(base_url=f"http://127.0.0.1:{ingest}", timeout=10) as c:
        for i, a in enumerate(accounts * 3):
            assert c.post(f"/account/{a}", params={"amount": i}).status_code == 200
        assert c.post("/account/m1", params={"amount": "x"}).status_code == 400
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for bad in (b"not json", json.dumps({"account": "m1", "amount": 2**70, "ts": 1}).encode()):
        producer.produce(cluster.topic(TOPIC), key=b"m1", value=bad)
    assert producer.flush(30) == 0
    # the workload is in before the pipeline's queries start: their first micro-batch
    # (the slow, cold one, which runs before the pipeline says ready) reads it, instead
    # of running empty ahead of the batches that do
    cluster.pipeline_ready(pipe)

    deadline = time.monotonic() + 120
    while True:  # every write applied on every node
        pipeline = scrape(cluster.pipeline_metrics)
        dead = pipeline["streamiq_pipeline_dead_letters"].get(
            ("streamiq_pipeline_dead_letters_total", (("view", "balances"),)), 0)
        # the batch with the two invalid records (written last) is committed: its rows
        # and markers are on the changelog; each node applied its partitions up to there
        # (the store's row count is RocksDB's estimate: not a count to wait for)
        held = [applied(p) for p in nodes]
        # and a batch of the view's query has ended (real-time mode's last
        # 10 s here: it reports only when it ends)
        ended = pipeline["streamiq_pipeline_batch_duration_seconds"].get(
            ("streamiq_pipeline_batch_duration_seconds_count", (("view", "balances"),)), 0)
        if dead == 2 and ended > 0:
            ends = changelog_ends(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic))
            if all(h and all(at >= ends[part] for part, at in h.items()) for h in held):
                break
        assert time.monotonic() < deadline, (dead, ended, held)
        time.sleep(0.5)
    cluster.settle(nodes, "balances")

    before = lookups(scrape(nodes[0]))
    with httpx.Client(base_url=f"http://127.0.0.1:{nodes[0]}", timeout=10) as c:
        for a in accounts * 2:
            r = c.get(f"/v1/views/balances/keys/{a}")
            assert r.status_code == 200, r.text
    after = lookups(scrape(nodes[0]))
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert delta.get("local", 0) + delta.get("forwarded", 0) == 2 * len(accounts), delta
    assert delta.get("local", 0) > 0 and delta.get("forwarded", 0) > 0, delta
    peers = sum(lookups(scrape(p)).get("peer", 0) for p in nodes[1:])
    assert peers == 0  # wire hops are not HTTP requests on the owner: never double counted

    doc = scrape(nodes[0])
    assert set(doc) >= NODE_FAMILIES, NODE_FAMILIES - set(doc)
    assert doc["streamiq_node_ready"][("streamiq_node_ready", ())] == 1
    assert doc["streamiq_membership_changes"][("streamiq_membership_changes_total", ())] >= 1
    progress = doc["streamiq_restore_progress_ratio"]
    assert progress and all(v == 1.0 for v in progress.values())
    lag = doc["streamiq_changelog_lag_records"]
    assert lag and all(v == 0 for v in lag.values())

    ing = scrape(ingest)
    assert set(ing) >= INGEST_FAMILIES, INGEST_FAMILIES - set(ing)
    topic = cluster.topic(TOPIC)
    assert ing["streamiq_ingest_records"][
        ("streamiq_ingest_records_total", (("topic", topic),))] == 3 * len(accounts)
    assert ing["streamiq_ingest_refused"][("streamiq_ingest_refused_total", ())] == 1

    pipeline = scrape(cluster.pipeline_metrics)
    assert set(pipeline) >= PIPELINE_FAMILIES, PIPELINE_FAMILIES - set(pipeline)
    read = pipeline["streamiq_pipeline_input_records"][
        ("streamiq_pipeline_input_records_total", (("view", "balances"),))]
    assert read == 3 * len(accounts) + 2  # every input record, the two invalid ones too
    batches = pipeline["streamiq_pipeline_batch_duration_seconds"][
        ("streamiq_pipeline_batch_duration_seconds_count", (("view", "balances"),))]
    assert batches > 0
    assert pipeline["streamiq_pipeline_dead_letters"][
        ("streamiq_pipeline_dead_letters_total", (("view", "balances"),))] == 2

    # what the pipeline published reaches every node's dashboard, up to its last batch
    # (a progress held back by the publishing limit goes out when the period ends)
    for port in nodes:
        while True:
            doc = HTTP.get(f"http://127.0.0.1:{port}/v1/pipeline", timeout=10).json()
            shown = doc["views"].get("balances", {})
            if shown.get("dead_letters") == 2 and shown.get("records") == read \
                    and shown.get("batches", 0) >= 1:  # the ended batch's progress too
                break
            assert time.monotonic() < deadline + 60, doc
            time.sleep(0.5)
        assert shown["batches"] >= 1 and shown["at"] > 0 and doc["skipped"] == 0
        doc = HTTP.get(f"http://127.0.0.1:{port}/v1/dashboard", timeout=10).json()
        assert doc["pipeline"]["balances"]["records"] == read
        assert {n["endpoint"] for n in doc["cluster"]["nodes"]} == {
            f"127.0.0.1:{p}" for p in nodes}
