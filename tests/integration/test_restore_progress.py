"""A node restoring from its changelog says how far it has come: ``/health``'s
``restoring`` and ``streamiq status`` (records applied of the changelog's, rate, time
left), until it is restored and ready (issue 49 item 4)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from procs import free_port

from streamiq.cli import status
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

ROWS = 200_000


def _changelog(bootstrap: str, tag: str) -> str:
    """A new cluster's prefix, its balances changelog of one partition holding ROWS."""
    prefix = f"{tag}{uuid.uuid4().hex[:6]}-"
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 1})
    produce_rows(bootstrap, topic, BALANCES,
                 ({"account": f"r{i}", "balance": i, "count": 1, "last_update": 0}
                  for i in range(ROWS)))
    return prefix


def _health_until_ready(port: int, seen: list[dict[str, Any]]
                        ) -> Iterator[tuple[int, dict[str, Any]]]:
    """The node's ``/health`` (status, document) every 50 ms while it is not ready;
    once ready, that nothing is left restoring (``seen``: for the message)."""
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, f"not ready in 180 s; progress seen: {seen[-3:]}"
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        except httpx.HTTPError:
            time.sleep(0.05)
            continue
        if r.status_code == 200:
            assert r.json().get("restoring") == {}  # restored: nothing left to report
            return
        yield r.status_code, r.json()
        time.sleep(0.05)


def test_a_restore_reports_records_rate_and_time_left_until_ready(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    prefix = _changelog(bootstrap, "rp")
    port = free_port()
    procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix, "--topic-prefix",
                   prefix, "--app", "bank", "--partitions", "1", "--port", str(port),
                   "--state-dir", str(tmp_path / "state"), "--standby-replicas", "0",
                   "--no-auth"])
    seen: list[dict[str, Any]] = []  # the partition's progress, each time it restored
    lines: list[str] = []  # what streamiq status said of it
    for code, doc in _health_until_ready(port, seen):
        progress = (doc.get("restoring") or {}).get("balances", {}).get("0")
        if progress is not None:
            assert code == 503  # restoring: not ready
            seen.append(progress)
            if progress["remaining"] >= 0 and progress["records"] > 0 and not lines:
                via, cluster, health = status.fetch(f"127.0.0.1:{port}")
                part = status.build_status(via, cluster, health)["nodes"][0]["partitions"]
                lines += [status.restore_text(p["restore"]) for p in part if p["restore"]]
    known = [p for p in seen if p["remaining"] >= 0 and p["records"] > 0]
    assert known, f"the restore was never seen under way: {seen}"
    for p in known:  # the changelog's end is the rows produced: applied + left = all
        assert p["records"] + p["remaining"] == ROWS, p
        assert p["rate"] > 0 and p["eta_s"] is not None and p["bytes"] > p["records"]
    records = [p["records"] for p in known]
    assert records == sorted(records)  # only ever forward
    assert lines and lines[0].startswith("no: ") and f"of {ROWS:,} records" in lines[0], lines


def test_a_copy_from_a_peer_reports_bytes_rate_and_time_left_until_ready(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    """A new replica copying a partition from its peer says so: the peer, bytes received
    of the file's, rate, time left (``/health``, ``streamiq status``, its heartbeat's
    ``copied`` for the dashboard); the sender paced slow enough to be seen under way."""
    prefix = _changelog(bootstrap, "rc")
    ports = free_port(), free_port()
    for port, name in zip(ports, ("a", "b"), strict=True):
        node = procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix,
                              "--topic-prefix", prefix, "--app", "bank", "--partitions", "1",
                              "--port", str(port), "--state-dir", str(tmp_path / name),
                              "--standby-replicas", "1", "--no-auth",
                              "--snapshot-send-mb-s", "0.5"], name=f"node-{name}")
        if name == "a":
            node.wait_ready(f"http://127.0.0.1:{port}/health", timeout=120)
    seen: list[dict[str, Any]] = []
    lines: list[str] = []
    reported: list[int] = []  # the copy's thousandths in B's heartbeat, as A hears it
    for code, doc in _health_until_ready(ports[1], seen):
        progress = (doc.get("restoring") or {}).get("balances", {}).get("0")
        if progress is not None and "copying_from" in progress:
            assert code == 503
            seen.append(progress)
            if progress["size"] > 0 and progress["bytes"] > 0 and not lines:
                via, cluster, health = status.fetch(f"127.0.0.1:{ports[1]}")
                part = status.build_status(via, cluster, health)["nodes"]
                lines += [status.restore_text(p["restore"]) for n in part
                          for p in n["partitions"] if p["restore"]]
            if not reported:  # heard within a heartbeat or two
                c = httpx.get(f"http://127.0.0.1:{ports[0]}/v1/cluster", timeout=5).json()
                reported += [copied for n in c["nodes"]
                             if n["endpoint"].endswith(f":{ports[1]}") and (copied := (
                                 n["partitions"].get("balances") or {}).get("0", {}).get(
                                     "copied")) is not None]
    known = [p for p in seen if p["size"] > 0 and p["bytes"] > 0]
    assert known, f"the copy was never seen under way: {seen}"
    assert {p["copying_from"] for p in known} == {f"127.0.0.1:{ports[0]}"}
    assert len({p["size"] for p in known}) == 1  # the file's size, from its header
    got = [p["bytes"] for p in known]
    assert got == sorted(got) and got[-1] <= known[0]["size"]  # only ever forward
    assert all(p["rate"] > 0 and p["eta_s"] is not None for p in known)
    assert lines and lines[0].startswith(f"no: copying from 127.0.0.1:{ports[0]}, "), lines
    assert reported and 0 <= reported[0] <= 1000, reported
