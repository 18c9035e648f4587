"""``streamiq status``, ``query`` and ``load`` as a person runs them, against real processes.

The CLI runs as ``python -m streamiq`` in a subprocess; what it prints is compared with
what the cluster was given (``load``'s own totals, checked by key lookups that wait for
the position ``load`` printed) and with the cluster's own map.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from procs import free_port

pytestmark = pytest.mark.integration


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamiq", *args], capture_output=True,
                          text=True, timeout=timeout)


def cli_json(*args: str) -> Any:
    r = cli(*args, "--json")
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def together(calls: list[tuple[str, ...]]) -> list[Any]:
    """``cli_json`` of each call, the processes run at once; in the calls' order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda args: cli_json(*args), calls))


def settled_status(port: int, nodes: int, timeout: float = 60) -> dict[str, Any]:
    """``status --json`` once every node is listed and ready."""
    deadline = time.monotonic() + timeout
    while True:
        doc: dict[str, Any] = cli_json("status", "--node", f"127.0.0.1:{port}")
        if len(doc["nodes"]) == nodes and all(n["ready"] for n in doc["nodes"]):
            return doc
        assert time.monotonic() < deadline, doc
        time.sleep(0.5)


def test_status_lists_every_node_and_every_partition_once_as_active(cluster: Any) -> None:
    ports = [p for p, _ in cluster.nodes(3, app="bank,orders")]
    doc = settled_status(ports[1], 3)
    endpoints = {f"127.0.0.1:{p}" for p in ports}
    assert doc["via"] == f"127.0.0.1:{ports[1]}"
    assert sorted(n["endpoint"] for n in doc["nodes"]) == sorted(endpoints)
    actives: dict[tuple[str, int], list[str]] = {}
    for n in doc["nodes"]:
        for p in n["partitions"]:
            if p["role"] == "active":
                actives.setdefault((p["view"], p["partition"]), []).append(n["endpoint"])
    every = {(v, i) for v in ("balances", "order_counts", "order_counts_1m") for i in range(3)}
    assert set(actives) == every
    assert all(len(owners) == 1 for owners in actives.values()), actives
    for view, parts in doc["views"].items():
        for pv in parts:
            assert actives[(view, pv["partition"])] == [pv["active"]]
    table = cli("status", "--node", f"127.0.0.1:{ports[0]}")
    assert table.returncode == 0, table.stderr
    assert "3 nodes (3 ready), 3 views, 9 partitions" in table.stdout
    assert all(ep in table.stdout for ep in endpoints)


def test_unreachable_node_is_one_line_and_exit_1() -> None:
    port = free_port()
    for args in (["status"], ["query", "balances", "100001"], ["query", "balances", "--scan"]):
        r = cli(*args, "--node", f"127.0.0.1:{port}")
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("streamiq: error: no streamiq node answered"), r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = cli("load", "bank", "--ingest", f"127.0.0.1:{port}")
    assert r.returncode == 1 and r.stderr == (
        f"streamiq: error: cannot reach the ingest service at http://127.0.0.1:{port} "
        "(connection refused or host unreachable)\n")


def wait_for(what: Any, expected: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while (got := what()) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return got


def test_load_then_query_reads_back_what_was_written(cluster: Any) -> None:
    pipe = cluster.pipeline("bank,orders", wait=False)  # ready while the others start
    ingest, _ = cluster.ingest("bank,orders")
    ports = [p for p, _ in cluster.nodes(3, app="bank,orders")]
    node = f"127.0.0.1:{ports[2]}"
    bank = cli_json("load", "bank", "--ingest", f"127.0.0.1:{ingest}", "--count", "50",
                    "--rate", "200", "--keys", "5", "--seed", "3")
    orders = cli_json("load", "orders", "--ingest", f"127.0.0.1:{ingest}", "--count", "30",
                      "--rate", "0", "--keys", "3", "--seed", "4")
    # both loads in before the pipeline's queries start: each view's first micro-batch
    # (the slow, cold one, which runs before the pipeline says ready) reads them, rather
    # than running empty ahead of the batches that do
    cluster.pipeline_ready(pipe)
    assert (bank["sent"], bank["failed"], bank["seed"]) == (50, 0, 3)
    assert sum(t["count"] for t in bank["totals"].values()) == 50
    # each key's lookup is a CLI process of its own, as a person runs it; they run at once
    got_bank = together([("query", "balances", account, "--node", node, "--position",
                          bank["position"], "--wait-ms", "120000") for account in bank["totals"]])
    for (account, total), got in zip(bank["totals"].items(), got_bank, strict=True):
        assert got["value"]["balance"] == total["balance"], (account, got, total)
        assert got["value"]["count"] == total["count"]
        assert got["served_by"] in {f"127.0.0.1:{p}" for p in ports} and got["hops"] in (0, 1)
    rows = wait_for(lambda: {r["key"]: r["value"]["balance"] for r in cli_json(
        "query", "balances", "--scan", "--prefix", "1000", "--node", node)["rows"]},
        {a: t["balance"] for a, t in bank["totals"].items()})
    assert rows == {a: t["balance"] for a, t in bank["totals"].items()}

    by_type: dict[str, float] = {}
    got_orders = together([("query", "order_counts", key, "--node", node, "--position",
                            orders["position"], "--wait-ms", "120000")
                           for key in orders["totals"]])
    for (key, total), got in zip(orders["totals"].items(), got_orders, strict=True):
        by_type[key.split("|")[1]] = by_type.get(key.split("|")[1], 0) + total["count"]
        assert got["value"]["count"] == total["count"]
        assert got["value"]["revenue"] == pytest.approx(total["revenue"])
    groups = wait_for(lambda: {g["type"]: g["sum(count)"] for g in cli_json(
        "query", "order_counts", "--aggregate", "--group-by", "type", "--agg", "sum(count)",
        "--node", node)["groups"]}, by_type)
    assert groups == by_type and sum(groups.values()) == 30
    key, total = next(iter(orders["totals"].items()))  # its 1-minute windows add up too
    in_windows = wait_for(lambda: sum(w["count"] for w in cli_json(
        "query", "order_counts_1m", key, "--windows", "--node", node)["windows"]),
        total["count"])
    assert in_windows == total["count"]

    pretty = cli("query", "balances", next(iter(bank["totals"])), "--node", node)
    assert pretty.returncode == 0 and "served by 127.0.0.1:" in pretty.stdout
    missing = cli("query", "balances", "no-such-account", "--node", node)
    assert missing.returncode == 1 and "no key 'no-such-account'" in missing.stderr
