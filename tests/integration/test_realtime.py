"""Real-time mode through the real parts: a user's own query in either mode served from
every node; every read with a position answered without waiting for a marker (ticks),
and none before its position is reflected; too few task slots refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from pipeline_harness import PipelineProcess
from procs import FAST_ENV, HTTP

from streamiq.kafka.admin import ensure_topics

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent


def _until(check: Any, what: str, timeout: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def _rows(port: int, view: str) -> dict[str, Any] | str:
    r = HTTP.get(f"http://127.0.0.1:{port}/v1/views/{view}/scan", params={"limit": 100})
    return {x["key"]: x["value"]["views"] for x in r.json()["rows"]} if r.status_code == 200 \
        else r.text[:200]


def test_a_users_query_in_either_mode_is_served_from_every_node(
        bootstrap: str, cluster: Any, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:8]
    cluster.name, cluster.prefix = f"c{suffix}", ""  # the user's job names its topics
    topic = f"modes_{suffix}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    ports = [p for p, _ in cluster.nodes(3, app=None)]
    cmd = [sys.executable, str(HERE / "user_modes.py"), bootstrap, topic, cluster.name,
           str(tmp_path / "ck")]
    job = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "user.log", cmd=cmd)
    job.env = {k: v for k, v in job.env.items() if not k.startswith("PYSPARK_")}
    want: Counter[str] = Counter()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        job.start()
        for i in range(300):
            page = f"/p{i % 7}"
            p.produce(topic, key=f"u{i % 13}", value=json.dumps({"user": f"u{i}", "page": page}))
            want[page] += 1
        assert p.flush(30) == 0
        for mode in ("rt", "mb"):
            view = f"{mode}_{topic}"
            _until(lambda v=view: all(_rows(port, v) == dict(want) for port in ports),
                   f"{view} exact on every node")
    finally:
        job.kill()
    marks = {m: json.loads((tmp_path / "ck" / m / "streamiq.json").read_text())["trigger"]
             for m in ("rt", "mb")}
    assert marks == {"rt": "real-time", "mb": "micro-batch"}
    assert "streamiq.sink:" not in job.tail()  # real-time mode refused nothing here


def test_every_read_with_a_position_is_answered_without_a_marker(cluster: Any) -> None:
    """With hour-long real-time batches no marker comes during the test. Every read with a
    write's position is answered with the write in it, on every node: the written key's
    lookup (its row carries its input position), and another key's lookup, a multi-get, a
    scan, an aggregate and a top-k (the node writes a tick to the input partition and
    waits until every aggregation task's tick row reached the partitions it reads:
    pipeline/ticks.py). A position past the input's end is never answered (503)."""
    pipe = cluster.pipeline("bank", extra=["--realtime-batch-s", "3600"], wait=False)
    ingest, _ = cluster.ingest("bank")
    ports = [p for p, _ in cluster.nodes(3, "bank")]
    cluster.pipeline_ready(pipe)
    assert "mode=real-time" in pipe.log()
    with httpx.Client(timeout=120) as c:
        # a position names one input partition: the client's reads carry both writes'
        # (the accounts may hash to different partitions, read apart by real-time mode)
        other = c.post(f"http://127.0.0.1:{ingest}/account/rt-other",
                       params={"amount": 1}).json()["position"]
        for i, port in enumerate(ports):
            w = c.post(f"http://127.0.0.1:{ingest}/account/rt-mine",
                       params={"amount": 10}).json()
            mine = 10 * (i + 1)
            at: dict[str, str | int] = {"position": f"{other},{w['position']}",
                                        "wait_ms": 60_000}
            base = f"http://127.0.0.1:{port}/v1/views/balances"
            r = c.get(f"http://127.0.0.1:{port}/account/rt-mine", params=at)
            assert r.status_code == 200, r.text
            assert r.json()["value"]["balance"] == mine  # the write is in it
            r = c.get(f"http://127.0.0.1:{port}/account/rt-other", params=at)
            assert r.status_code == 200 and r.json()["value"]["balance"] == 1, r.text
            r = c.get(f"{base}/scan", params={**at, "prefix": "rt-"})
            assert r.status_code == 200, r.text
            assert {x["key"]: x["value"]["balance"] for x in r.json()["rows"]} == {
                "rt-mine": mine, "rt-other": 1}, r.text
            r = c.get(f"{base}/aggregate", params={**at, "agg": "sum(balance)"})
            assert r.status_code == 200, r.text
            assert r.json()["groups"] == [{"sum(balance)": mine + 1}], r.text
            r = c.post(f"{base}/keys", params=at, json={"keys": ["rt-mine", "rt-other"]})
            assert r.status_code == 200, r.text
            assert [x["value"]["balance"] for x in r.json()["results"]] == [mine, 1], r.text
            r = c.get(f"{base}/top", params={**at, "column": "balance", "k": 1})
            assert r.status_code == 200, r.text
            assert [x["value"]["balance"] for x in r.json()["rows"]] == [mine], r.text
        topic, part, offset = w["position"].rsplit(":", 2)
        ahead: dict[str, str | int] = {"position": f"{topic}:{part}:{int(offset) + 1000}",
                                       "wait_ms": 500}
        for r in (c.get(f"http://127.0.0.1:{ports[0]}/account/rt-other", params=ahead),
                  c.get(f"http://127.0.0.1:{ports[1]}/v1/views/balances/aggregate",
                        params={**ahead, "agg": "sum(balance)"})):
            assert r.status_code == 503, (r.url, r.text)
            assert r.json()["code"] == "NOT_UP_TO_BOUND", (r.url, r.text)
    assert "ticks fold into" in pipe.log()


def test_too_few_local_task_slots_are_refused_in_one_line(bootstrap: str,
                                                          tmp_path: Path) -> None:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "streamiq", "pipeline", "--bootstrap-servers", bootstrap,
         "--app", "bank,orders", "--master", "local[2]", "--checkpoint-dir",
         str(tmp_path / "ck"), "--topic-prefix", f"s{uuid.uuid4().hex[:6]}-",
         "--metrics-port", "0"],
        env={**os.environ, **FAST_ENV}, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("streamiq pipeline: --master local[2] has 2 task slots; real-time mode "
                    "holds 24 for these views (every input and shuffle partition of each "
                    "query): give local[24] (threads, not cores), or --trigger micro-batch")
