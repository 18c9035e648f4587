"""streamiq status: the document built from /v1/cluster and /health, its table, errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from streamiq.cli import status
from streamiq.cli.common import CliError
from streamiq.cli.main import main

A, B, C = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"


def _held(*parts: int, lag: int = 0, restored: int = 1) -> dict[str, Any]:
    return {str(p): {"offset": 10 + p, "lag": lag, "restored": restored} for p in parts}


def cluster_doc() -> dict[str, Any]:
    """Three nodes, one view of three partitions, one standby each; C still restores
    partition 1 and A still holds partition 2 it no longer is assigned (previous)."""
    assigned = {"0": [A, B], "1": [B, C], "2": [C, B]}
    replicas = {"0": [A, B], "1": [B], "2": [C, B, A]}
    return {
        "self": A,
        "nodes": [
            {"endpoint": A, "self": True, "started_at": 1.0,
             "partitions": {"balances": _held(0, 2)}},
            {"endpoint": B, "self": False, "started_at": 2.0,
             "partitions": {"balances": _held(0, 1, 2)}},
            {"endpoint": C, "self": False, "started_at": 3.0,
             "partitions": {"balances": {**_held(2), **_held(1, lag=40, restored=0)}}},
        ],
        "views": {"balances": {p: {"assigned": assigned[p],
                                   "replicas": [{"address": r, "role": "x", "lag": 0}
                                                for r in replicas[p]]}
                               for p in assigned}},
        "health": {},
    }


HEALTH: dict[str, dict[str, Any] | None] = {
    A: {"ready": True, "faults": {}, "down": [], "failed": None,
        "skipped_records": {"membership": 0, "changelog": 0}},
    B: {"ready": True, "faults": {"materializer": 2}, "down": []},
    C: None}


def test_roles_lag_and_restored_per_node() -> None:
    doc = status.build_status(A, cluster_doc(), HEALTH)
    by_node = {n["endpoint"]: n for n in doc["nodes"]}
    roles = {ep: [(p["partition"], p["role"]) for p in n["partitions"]]
             for ep, n in by_node.items()}
    assert roles == {A: [(0, "active"), (2, "previous")],
                     B: [(0, "standby"), (1, "active"), (2, "standby")],
                     C: [(1, "standby"), (2, "active")]}
    c1 = by_node[C]["partitions"][0]
    assert (c1["lag"], c1["restored"], c1["offset"]) == (40, False, 11)
    assert by_node[A]["ready"] and by_node[A]["problems"] == []
    assert by_node[B]["problems"] == ["faults: materializer 2"]
    assert not by_node[C]["reachable"] and not by_node[C]["ready"]
    assert doc["views"]["balances"][1] == {"partition": 1, "active": B, "standbys": [C],
                                           "answering": [B]}


def test_assigned_partition_not_yet_held_is_listed_unrestored() -> None:
    doc = cluster_doc()
    doc["nodes"][2]["partitions"] = {}  # C just joined: holds nothing yet
    c = status.build_status(A, doc, HEALTH)["nodes"][2]
    assert [(p["partition"], p["role"], p["restored"], p["lag"]) for p in c["partitions"]] \
        == [(1, "standby", False, None), (2, "active", False, None)]


def test_a_partition_restoring_shows_how_far_from_its_nodes_health() -> None:
    health = {**HEALTH, C: {"ready": False, "restoring": {"balances": {"1": {
        "records": 120_000, "bytes": 9_000_000, "remaining": 213_800, "elapsed_s": 2.3,
        "rate": 52_000.0, "eta_s": 4.1}}}}}
    doc = status.build_status(A, cluster_doc(), health)
    c1 = doc["nodes"][2]["partitions"][0]
    assert (c1["partition"], c1["restored"]) == (1, False)
    assert c1["restore"]["records"] == 120_000 and c1["restore"]["eta_s"] == 4.1
    assert doc["nodes"][0]["partitions"][0]["restore"] is None  # restored: nothing
    text = render_text(doc)
    assert "no: 120,000 of 333,800 records (35%), 52,000/s, 4 s left" in text


def test_restore_text_before_the_end_is_known_and_from_junk() -> None:
    assert status.restore_text({"records": 5, "remaining": -1, "rate": 1.0,
                                "eta_s": None}) == "no: 5 records, end not yet known"
    assert status.restore_text({"records": "x"}) == "no"  # a node of another version
    assert status.restore_text({"records": 0, "remaining": 0, "rate": 0.0,
                                "eta_s": None}) == "no: 0 of 0 records, 0/s"


def test_a_partition_copied_from_a_peer_shows_how_far_the_copy_is() -> None:
    health = {**HEALTH, C: {"ready": False, "restoring": {"balances": {"1": {
        "copying_from": "10.0.0.5:9001", "bytes": 12 << 20, "size": 40 << 20,
        "elapsed_s": 0.3, "rate": 40.0 * (1 << 20), "eta_s": 0.7}}}}}
    doc = status.build_status(A, cluster_doc(), health)
    assert doc["nodes"][2]["partitions"][0]["restore"]["copying_from"] == "10.0.0.5:9001"
    assert "no: copying from 10.0.0.5:9001, 12.0 of 40.0 MB (30%), 40.0 MB/s, 1 s left" \
        in render_text(doc)
    assert status.restore_text({"copying_from": "a:1", "bytes": 0, "size": -1, "rate": 0.0,
                                "eta_s": None}) == "no: copying from a:1, starting"
    assert status.restore_text({"copying_from": "a:1", "bytes": "x"}) == \
        "no: copying from a peer"


def render_text(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(status.render(doc))
    return out.getvalue()


def test_table_shows_every_node_role_and_problem() -> None:
    text = render_text(status.build_status(A, cluster_doc(), HEALTH))
    assert text.splitlines()[0].startswith(
        f"cluster via {A}: 3 nodes (2 ready), 1 views, 3 partitions")
    for word in (A, B, C, "previous", "unreachable", "faults: materializer 2",
                 "did not answer /health"):
        assert word in text
    assert text.count("active") == 3 and text.count("standby") == 3


def test_table_says_which_partition_no_replica_can_answer() -> None:
    doc = cluster_doc()
    doc["views"]["balances"]["1"]["replicas"] = []
    assert "no replica can answer: balances p1" in render_text(
        status.build_status(A, doc, HEALTH))


def _transport(routes: dict[str, Any]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        where = f"{request.url.host}:{request.url.port}{request.url.path}"
        answer = routes.get(where)
        if answer is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=answer)
    return httpx.MockTransport(handle)


def test_fetch_tries_the_seeds_in_turn_and_asks_every_member_for_health() -> None:
    routes = {f"{B}/v1/cluster": cluster_doc(), f"{A}/health": HEALTH[A],
              f"{B}/health": HEALTH[B]}
    via, cluster, health = status.fetch(f"{C},{B}", transport=_transport(routes))
    assert via == B and cluster["self"] == A
    assert health == {A: HEALTH[A], B: HEALTH[B], C: None}


def test_fetch_skips_a_seed_that_is_not_a_streamiq_node() -> None:
    routes = {f"{C}/v1/cluster": {"hello": "world"}, f"{B}/v1/cluster": cluster_doc()}
    assert status.fetch(f"{C},{B}", transport=_transport(routes))[0] == B
    with pytest.raises(CliError, match="its /v1/cluster is not a streamiq cluster map"):
        status.fetch(C, transport=_transport(routes))


def test_fetch_from_nothing_reachable_is_one_clear_error() -> None:
    with pytest.raises(CliError, match=r"no streamiq node answered .*127\.0\.0\.1:1: connection "
                                       "refused or host unreachable"):
        status.fetch("127.0.0.1:1", transport=_transport({}))


def test_unreachable_node_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["status", "--node", "127.0.0.1:1", "--timeout", "1"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("streamiq: error: no streamiq node answered") and err.count("\n") == 1


def test_json_output_is_the_status_document(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(status, "fetch", lambda seeds, timeout, **_: (seeds, cluster_doc(), HEALTH))
    monkeypatch.setenv("STREAMIQ_NODE", B)
    with pytest.raises(SystemExit) as exc:
        main(["status", "--json"])
    assert exc.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["via"] == B and [n["endpoint"] for n in doc["nodes"]] == [A, B, C]


def test_piped_table_keeps_long_endpoints_whole(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    long = "serving-node-with-a-long-name.cluster.example.internal:19001"
    doc = cluster_doc()
    doc["nodes"][0]["endpoint"] = long
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(status, "fetch",
                        lambda seeds, timeout, **_: (seeds, doc, {long: HEALTH[A]}))
    with pytest.raises(SystemExit) as exc:
        main(["status", "--node", long])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"cluster via {long}: 3 nodes (1 ready)" in out
    assert any(line.startswith(long) for line in out.splitlines())


def _up_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid: int) -> None:
    """The up.json a running ``streamiq up`` keeps: ingest crash-looping."""
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "state"))
    parts = [{"name": "ingest", "where": "x", "ready": False, "restarts": 6,
              "crash_looping": True, "last_exit": "code 1 at 12:00:00", "restart_in_s": 30,
              "restart_at": time.time() + 30},
             {"name": f"node:{A}", "where": "y", "ready": True, "restarts": 0,
              "crash_looping": False, "last_exit": None, "restart_in_s": None,
              "restart_at": None}]
    (tmp_path / "up.json").write_text(json.dumps({"pid": pid, "parts": parts}))


def test_status_shows_the_restarts_of_a_running_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _up_json(tmp_path, monkeypatch, os.getpid())
    monkeypatch.setattr(status, "fetch", lambda seeds, timeout, **_: (seeds, cluster_doc(), HEALTH))
    with pytest.raises(SystemExit) as exc:
        main(["status"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"streamiq up (pid {os.getpid()}): 1 of 2 parts ready" in out
    assert re.search(r"ingest crash-looping: 6 restarts, next in (29|30) s; last exit code 1 "
                     r"at 12:00:00", out), out
    with pytest.raises(SystemExit):
        main(["status", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["up"]["parts"][0]["restarts"] == 6


def test_status_ignores_the_file_of_an_up_that_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    _up_json(tmp_path, monkeypatch, gone.pid)
    assert status.up_parts() is None
    (tmp_path / "up.json").write_text("{half")
    assert status.up_parts() is None


def test_status_with_no_node_answering_still_shows_ups_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _up_json(tmp_path, monkeypatch, os.getpid())
    with pytest.raises(SystemExit) as exc:
        main(["status", "--node", "127.0.0.1:1", "--timeout", "1"])
    assert exc.value.code == 1
    out = capsys.readouterr()
    assert "ingest crash-looping" in out.out and "no streamiq node answered" in out.err


def test_write_to_stored_is_every_nodes_histogram_merged() -> None:
    """Each node measures the rows it stores; status merges the histograms (a node of
    another version, without them, is left out) and prints p50 and p99 per view."""
    buckets = [0.005, 0.01, 0.025, 0.05]

    def node(counts: list[int]) -> dict[str, Any]:
        return {"freshness": {"balances": {"buckets": buckets, "counts": counts}}}

    health = {A: node([10, 80, 0, 0, 0]), B: node([0, 0, 0, 9, 1]), C: {"ready": True},
              "x": None}
    got = status.freshness(health)
    assert set(got) == {"balances"} and got["balances"]["rows"] == 100
    assert 5.0 < got["balances"]["p50_ms"] <= 10.0  # 90 of 100 at or under 10 ms
    assert 25.0 < got["balances"]["p99_ms"] <= 50.0  # the tail is B's
    doc = status.build_status(A, cluster_doc(), health)
    out = io.StringIO()
    Console(file=out, width=200).print(status.render(doc))
    assert re.search(r"write -> stored, balances: p50 [\d.]+ ms, p99 \d+ ms \(100 rows",
                     out.getvalue()), out.getvalue()


def test_the_stages_of_write_to_stored_are_merged_and_printed_beside_it() -> None:
    """Nodes that split a row's time (pipeline, node) have status print both stages'
    p50 and p99 after the view's; a node without them (another version) adds none."""
    buckets = [0.005, 0.01, 0.025, 0.05]

    def node(stages: bool) -> dict[str, Any]:
        f: dict[str, Any] = {"buckets": buckets, "counts": [0, 10, 0, 0, 0]}
        if stages:
            f["stages"] = {"pipeline": {"buckets": buckets, "counts": [10, 0, 0, 0, 0]},
                           "node": {"buckets": buckets, "counts": [0, 0, 0, 10, 0]}}
        return {"freshness": {"balances": f}}

    got = status.freshness({A: node(True), B: node(False), C: node(True)})
    assert got["balances"]["rows"] == 30
    assert set(got["balances"]["stages"]) == {"pipeline", "node"}
    assert got["balances"]["stages"]["pipeline"]["rows"] == 20
    assert got["balances"]["stages"]["pipeline"]["p99_ms"] <= 5.0
    assert 25.0 < got["balances"]["stages"]["node"]["p50_ms"] <= 50.0
    assert "stages" not in status.freshness({B: node(False)})["balances"]
    out = io.StringIO()
    Console(file=out, width=300).print(status.render(
        status.build_status(A, cluster_doc(), {A: node(True)})))
    assert re.search(r"\(10 rows stored on every node since it started\); pipeline p50 "
                     r"[\d.]+ ms, p99 [\d.]+ ms; node p50 \d+ ms, p99 \d+ ms",
                     out.getvalue()), out.getvalue()
