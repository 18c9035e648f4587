"""Nodes with no user code serve what a user's own query writes through the sink.

A user-written streaming query (a join and an aggregate, not a streamiq App) writes
through ``streamiq.sink``; three nodes started with Kafka settings only (no ``--app``,
no ``--views-module``) find its view on the catalog and answer every query type, on
every node, equal to a ground truth, across a SIGKILL and restart of the query. A
second, windowed view started while the nodes run (and serve the first) is served
without restarting them.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import user_query
from changelog import produce_rows
from pipeline_harness import PipelineProcess
from topicjunk import JUNK, health, produce, reasons, until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.catalog import CATALOG_TOPIC_CONFIG, ViewSpec, catalog_topic

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
MINUTE = 60_000
T0 = 1_700_000_000_000


def _events(n: int) -> list[dict[str, Any]]:
    rnd = random.Random(17)
    return [{"user": f"u{rnd.randrange(user_query.USERS)}", "page": f"p{rnd.randrange(5)}",
             "ms": rnd.randrange(1, 500), "ts": T0 + i * 700} for i in range(n)]


def _windows(events: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for e in events:
        k = (e["page"], e["ts"] - e["ts"] % MINUTE)
        out[k] = out.get(k, 0) + 1
    return out


def _produce(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    import json

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                  "enable.idempotence": True, "linger.ms": 5})
    for e in events:
        p.produce(topic, key=e["user"], value=json.dumps(e))
    assert p.flush(30) == 0


def _until(check: Callable[[], Any], what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def _rows(c: httpx.Client, port: int, view: str) -> dict[str, dict[str, Any]]:
    r = c.get(f"http://127.0.0.1:{port}/v1/views/{view}/scan", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return {x["key"]: x["value"] for x in r.json()["rows"]}


def _query(argv: list[str], tmp_path: Path, name: str) -> PipelineProcess:
    cmd = [sys.executable, str(HERE / argv[0]), *argv[1:]]
    return PipelineProcess(argv[1], tmp_path / f"{name}-ck", name, tmp_path / f"{name}.log",
                           cmd=cmd)


def test_nodes_without_user_code_serve_a_user_query_and_views_added_later(
        bootstrap: str, cluster: Any, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    cluster.name, cluster.prefix = f"c{suffix}", ""  # the user's query names its topics
    topic, view, wview = f"pv-{suffix}", f"pv_{suffix}", f"pvw_{suffix}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    events = _events(400)
    _produce(bootstrap, topic, events[:200])
    ports = [p for p, _ in cluster.nodes(3, app=None)]
    user = None
    windows = None
    with httpx.Client(timeout=30) as c:
        assert c.get(f"http://127.0.0.1:{ports[0]}/v1/views").json() == {"views": []}
        user = _query([user_query.__file__, bootstrap, topic, view, cluster.name,
                          str(tmp_path / "user-ck")], tmp_path, "user")
        try:
            user.start()
            want_first = user_query.truth(events[:200])
            _until(lambda: all(_served(c, p, view) and _rows(c, p, view) == want_first
                               for p in ports), "the first half on every node")
            # the second view's query starts now, while the nodes serve the first: its
            # Spark start overlaps the first query's kill and restart
            windows = _query(["user_windows.py", bootstrap, topic, wview, cluster.name,
                              str(tmp_path / "win-ck")], tmp_path, "windows")
            windows.start(wait=False)
            _produce(bootstrap, topic, events[200:])
            time.sleep(random.uniform(0.5, 2.0))
            user.kill()  # SIGKILL mid-stream (driver, JVM and Python workers)
            user.start()
            want = user_query.truth(events)
            _until(lambda: all(_rows(c, p, view) == want for p in ports), "all of it")
            for port in ports:
                _every_query_type(c, port, view, want)

            windows.wait_ready()
            want_w = _windows(events)
            _until(lambda: all(_window_counts(c, p, wview) == want_w for p in ports),
                   "the windowed view, added while the nodes run, on every node")
            for port in ports:
                _window_fetches(c, port, wview, want_w)
        finally:
            user.kill()
            if windows is not None:
                windows.kill()


def _served(c: httpx.Client, port: int, view: str) -> bool:
    views = c.get(f"http://127.0.0.1:{port}/v1/views").json()["views"]
    return any(v["name"] == view for v in views)


def _every_query_type(c: httpx.Client, port: int, view: str,
                      want: dict[str, dict[str, Any]]) -> None:
    base = f"http://127.0.0.1:{port}/v1/views/{view}"
    described = next(v for v in c.get(f"http://127.0.0.1:{port}/v1/views").json()["views"]
                     if v["name"] == view)
    assert described["key_columns"] == ["country", "page"]
    assert described["value_columns"] == ["views", "total_ms", "last_seen"]
    for key, row in want.items():
        r = c.get(f"{base}/keys/{key}")
        assert r.status_code == 200 and r.json()["value"] == row, (port, key, r.text)
    r = c.post(f"{base}/keys", json={"keys": [*want, "XX|none"]})
    got = {x["key"]: x["value"] for x in r.json()["results"] if x["found"]}
    assert got == want, r.text
    r = c.get(f"{base}/aggregate", params={"group_by": "country", "agg": "sum(views)"})
    per_country: dict[str, int] = {}
    for row in want.values():
        per_country[row["country"]] = per_country.get(row["country"], 0) + row["views"]
    assert r.json()["status"] == "OK", r.text
    assert {g["country"]: g["sum(views)"] for g in r.json()["groups"]} == per_country


def _window_counts(c: httpx.Client, port: int, view: str) -> dict[tuple[str, int], int] | str:
    r = c.get(f"http://127.0.0.1:{port}/v1/views/{view}/windows", params={"limit": 1000})
    if r.status_code != 200:
        return r.text
    return {(x["value"]["page"], x["value"]["window_start"]): x["value"]["views"]
            for x in r.json()["rows"]}


def _window_fetches(c: httpx.Client, port: int, view: str,
                    want: dict[tuple[str, int], int]) -> None:
    for page in sorted({p for p, _ in want}):
        r = c.get(f"http://127.0.0.1:{port}/v1/views/{view}/keys/{page}/windows",
                  params={"from": T0 - MINUTE, "to": T0 + 10 * MINUTE})
        assert r.status_code == 200, r.text
        got = {(w["page"], w["window_start"]): w["views"] for w in r.json()["windows"]}
        assert got == {k: n for k, n in want.items() if k[0] == page}, (port, page, r.text)


def test_a_catalog_record_claiming_a_huge_partition_count_is_refused(cluster: Any) -> None:
    """Nodes refuse what a forged catalog record cannot be (a million partitions: every
    node would hold and heartbeat them all) and skip records that are not descriptions
    (nested past the parser, ~1 MB), before they start and while they run; they stay
    up and ready and keep answering."""
    conf = {"bootstrap.servers": cluster.bootstrap}
    changelog = cluster.topic(BALANCES.changelog_topic)
    ensure_topics(conf, {changelog: 3})
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(30)]
    produce_rows(cluster.bootstrap, changelog, BALANCES, rows)
    catalog = cluster.topic(catalog_topic(cluster.name))
    ensure_topics(conf, {catalog: 1}, config=CATALOG_TOPIC_CONFIG)

    def claim(name: str, partitions: int) -> bytes:
        return ViewSpec(name=name, key_columns=(("k", "string"),), value_columns=(),
                        changelog_topic=cluster.topic(f"{name}-changelog"),
                        partitions=partitions).to_json()

    produce(cluster.bootstrap, catalog, [*JUNK, claim("huge", 10**6)], key=b"huge")
    ports = [p for p, _ in cluster.nodes(2, "bank")]
    produce(cluster.bootstrap, catalog, [claim("wide", 50_000), *JUNK[:2]], key=b"wide")
    until(lambda: all(reasons(p, "catalog").get("too_many_partitions", 0) >= 2
                      and reasons(p, "catalog").get("not_json", 0) >= 3 for p in ports),
          "both claims refused and the junk skipped on every node",
          show=lambda: [health(p) for p in ports])
    with httpx.Client(timeout=10) as c:
        for port in ports:
            h = c.get(f"http://127.0.0.1:{port}/health")
            assert h.status_code == 200, h.text  # ready
            doc = h.json()
            assert {"huge", "wide"} <= set(doc["refused_views"]), doc["refused_views"]
            assert doc["faults"] == {} and doc["skip_reasons"]["catalog"]["too_large"] >= 3
            names = {v["name"] for v in c.get(f"http://127.0.0.1:{port}/v1/views").json()["views"]}
            assert "huge" not in names and "wide" not in names
            for row in rows:
                r = c.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/{row['account']}")
                assert r.status_code == 200 and r.json()["value"] == row, r.text
            metrics = c.get(f"http://127.0.0.1:{port}/metrics").text
            assert ('streamiq_topic_records_skipped_total{reason="too_many_partitions",'
                    'topic="catalog"}') in metrics
