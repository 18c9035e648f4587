"""A node restoring from its changelog says how far it has come: ``/health``'s
``restoring`` and ``streamiq status`` (records applied of the changelog's, rate, time
left), until it is restored and ready (issue 49 item 4)."""

from __future__ import annotations

import time
import uuid
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


def test_a_restore_reports_records_rate_and_time_left_until_ready(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    prefix = f"rp{uuid.uuid4().hex[:6]}-"
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 1})
    produce_rows(bootstrap, topic, BALANCES,
                 ({"account": f"r{i}", "balance": i, "count": 1, "last_update": 0}
                  for i in range(ROWS)))
    port = free_port()
    procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix, "--topic-prefix",
                   prefix, "--app", "bank", "--partitions", "1", "--port", str(port),
                   "--state-dir", str(tmp_path / "state"), "--standby-replicas", "0",
                   "--no-auth"])
    seen: list[dict[str, Any]] = []  # the partition's progress, each time it restored
    lines: list[str] = []  # what streamiq status said of it
    deadline = time.monotonic() + 180
    ready: dict[str, Any] | None = None
    while ready is None:
        assert time.monotonic() < deadline, f"not ready in 180 s; progress seen: {seen[-3:]}"
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        except httpx.HTTPError:
            time.sleep(0.05)
            continue
        doc = r.json()
        progress = (doc.get("restoring") or {}).get("balances", {}).get("0")
        if progress is not None:
            assert r.status_code == 503  # restoring: not ready
            seen.append(progress)
            if progress["remaining"] >= 0 and progress["records"] > 0 and not lines:
                via, cluster, health = status.fetch(f"127.0.0.1:{port}")
                part = status.build_status(via, cluster, health)["nodes"][0]["partitions"]
                lines += [status.restore_text(p["restore"]) for p in part if p["restore"]]
        elif r.status_code == 200:
            ready = doc
        time.sleep(0.05)
    assert ready.get("restoring") == {}  # restored: nothing left to report
    known = [p for p in seen if p["remaining"] >= 0 and p["records"] > 0]
    assert known, f"the restore was never seen under way: {seen}"
    for p in known:  # the changelog's end is the rows produced: applied + left = all
        assert p["records"] + p["remaining"] == ROWS, p
        assert p["rate"] > 0 and p["eta_s"] is not None and p["bytes"] > p["records"]
    records = [p["records"] for p in known]
    assert records == sorted(records)  # only ever forward
    assert lines and lines[0].startswith("no: ") and f"of {ROWS:,} records" in lines[0], lines
