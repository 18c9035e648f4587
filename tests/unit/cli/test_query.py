"""streamiq query: which flags go together, what is printed, exit codes."""

from __future__ import annotations

import functools
import io
import json
import re
from typing import Any

import httpx
import pytest
from rich.console import Console

from streamiq.cli import query
from streamiq.cli.main import build_parser, main
from streamiq.client import Client

NODE = "127.0.0.1:9001"
ROW = {"account": "100001", "balance": 42, "count": 3, "last_update": 1700000000000}


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(("argv", "message"), [
    (["query", "balances"], "give a KEY, or --scan or --aggregate"),
    (["query", "balances", "k", "--start", "a"], "--start does not apply to a key lookup"),
    (["query", "balances", "k", "--prefix", "a"], "--prefix does not apply to a key lookup"),
    (["query", "balances", "--scan", "--agg", "sum(x)"], "--agg does not apply to --scan"),
    (["query", "balances", "k", "--consistent"],
     "--consistent does not apply to a key lookup"),
    (["query", "balances", "k", "--max-staleness-ms", "-5"],
     "--max-staleness-ms: must not be negative"),
    (["query", "balances", "--aggregate", "--limit", "5"],
     "--limit does not apply to --aggregate"),
    (["query", "balances", "k", "--scan"], "KEY 'k' is for a key lookup"),
    (["query", "balances", "--scan", "--limit", "1001"], "--limit: expected 1-1000"),
    (["query", "balances", "k", "--max-lag", "-1"], "--max-lag: must not be negative"),
    (["query", "balances", "--scan", "--aggregate"], "--aggregate: not allowed with argument"),
    (["query", "balances", "k", "--limit", "x"], "--limit: invalid int value"),
    (["query", "order_counts_1m", "--windows"], "--windows: give the KEY"),
    (["query", "order_counts_1m", "k", "--windows", "--position", "t:0:1"],
     "--position does not apply to --windows"),
    (["query", "balances", "--aggregate", "--windows"], "--windows: not allowed with"),
])
def test_flags_that_do_not_fit_are_usage_errors_naming_the_flag(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in usage_error(argv, capsys)


def test_node_address_from_flag_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args(["query", "v", "k"]).node == "localhost:9001"
    monkeypatch.setenv("STREAMIQ_NODE", "h:1")
    assert build_parser().parse_args(["query", "v", "k"]).node == "h:1"
    assert build_parser().parse_args(["query", "v", "k", "--node", "h:2"]).node == "h:2"


class FakeCluster(httpx.MockTransport):
    """One node answering /v1/views, /v1/cluster and ``answers`` (path: status, body, hops);
    records the query strings it saw in ``seen``."""

    def __init__(self, answers: dict[str, tuple[int, Any, int]]) -> None:
        super().__init__(self.handle)
        self.answers = answers
        self.seen: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append(f"{path}?{request.url.query.decode()}")
        if path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "balances", "partitions": 1}]})
        if path == "/v1/cluster":
            return httpx.Response(200, json={"nodes": [{"endpoint": NODE}], "views": {
                "balances": {"0": {"assigned": [NODE], "replicas": []}}}})
        status, body, hops = self.answers[path]
        return httpx.Response(status, json=body, headers={"x-streamiq-hops": str(hops)})



def run_cli(monkeypatch: pytest.MonkeyPatch, transport: httpx.MockTransport,
            argv: list[str]) -> int:
    monkeypatch.setattr(query, "Client", functools.partial(Client, transport=transport))
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--node", NODE])
    return int(exc.value.code or 0)


def test_key_lookup_json_says_who_served_and_hops(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    body = {"view": "balances", "key": "100001", "partition": 0, "value": ROW,
            "served_by": "127.0.0.1:9002", "role": "active", "lag": 0}
    t = FakeCluster({"/v1/views/balances/keys/100001": (200, body, 1)})
    code = run_cli(monkeypatch, t, ["query", "balances", "100001", "--json",
                                    "--position", "bank:0:5", "--wait-ms", "100"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {**body, "asked": NODE, "hops": 1}
    assert "/v1/views/balances/keys/100001?position=bank%3A0%3A5&wait_ms=100" in t.seen


def test_missing_key_exits_1(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    t = FakeCluster({"/v1/views/balances/keys/nope": (
        404, {"code": "NOT_FOUND", "detail": "no such key"}, 0)})
    assert run_cli(monkeypatch, t, ["query", "balances", "nope", "--json"]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["status"] == "NOT_FOUND" and "no key 'nope'" in out.err


def test_server_error_is_one_line_exit_1(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    t = FakeCluster({"/v1/views/nope/keys/k": (
        404, {"code": "UNKNOWN_VIEW", "detail": "unknown view 'nope'"}, 0)})
    assert run_cli(monkeypatch, t, ["query", "nope", "k"]) == 1
    assert capsys.readouterr().err == \
        f"streamiq: error: 404 UNKNOWN_VIEW: unknown view 'nope' (from {NODE})\n"


def test_scan_and_aggregate_pass_the_api_parameters(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    scan = {"status": "OK", "rows": [{"key": "100001", "partition": 0, "value": ROW}],
            "count": 1, "next_cursor": None, "partitions": 1,
            "missing_partitions": [], "served_by": NODE}
    agg = {"status": "OK", "groups": [{"sum(balance)": 42}], "partitions": 1,
           "missing_partitions": [], "served_by": NODE}
    t = FakeCluster({"/v1/views/balances/scan": (200, scan, 0),
                      "/v1/views/balances/aggregate": (200, agg, 2)})
    assert run_cli(monkeypatch, t, ["query", "balances", "--scan", "--start", "1", "--end",
                                    "2", "--prefix", "10", "--limit", "5"]) == 0
    assert run_cli(monkeypatch, t, ["query", "balances", "--aggregate", "--group-by",
                                    "account", "--agg", "sum(balance)", "--agg", "count(*)",
                                    "--max-lag", "7"]) == 0
    assert "/v1/views/balances/scan?from=1&to=2&prefix=10&limit=5" in t.seen
    assert ("/v1/views/balances/aggregate?group_by=account&agg=sum%28balance%29"
            "&agg=count%28%2A%29&max_lag=7") in t.seen
    out = capsys.readouterr().out
    assert "100001" in out and "sum(balance)" in out and "2 hops" in out


def test_a_consistent_aggregate_prints_its_cut_and_takes_it_back_as_position(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cut = "bank-transactions:0:4,bank-transactions:1:9"
    agg = {"status": "OK", "groups": [{"sum(balance)": 42}], "partitions": 1,
           "missing_partitions": [], "served_by": NODE, "cut": cut}
    t = FakeCluster({"/v1/views/balances/aggregate": (200, agg, 0),
                     "/v1/views/balances/scan": (200, {**agg, "rows": [], "count": 0,
                                                       "next_cursor": None}, 0)})
    assert run_cli(monkeypatch, t, ["query", "balances", "--aggregate", "--agg",
                                    "sum(balance)", "--consistent", "--position", cut,
                                    "--wait-ms", "900"]) == 0
    assert run_cli(monkeypatch, t, ["query", "balances", "--scan",
                                    "--max-staleness-ms", "0"]) == 0
    assert ("/v1/views/balances/aggregate?agg=sum%28balance%29&consistent=true&position="
            "bank-transactions%3A0%3A4%2Cbank-transactions%3A1%3A9&wait_ms=900") in t.seen
    assert "/v1/views/balances/scan?limit=100&max_staleness_ms=0" in t.seen
    assert f"at cut {cut}" in capsys.readouterr().out


def render_text(mode: str, doc: dict[str, Any]) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(query.render(mode, doc))
    return out.getvalue()


def test_pretty_key_answer_lists_columns_and_who_served() -> None:
    text = render_text("key", {"view": "balances", "key": "[b]x", "partition": 2,
                               "value": ROW, "served_by": "n2", "role": "standby", "lag": 4,
                               "asked": "n1", "hops": 1})
    assert "balances [b]x (partition 2)" in text  # data is never taken for markup
    assert re.search(r"^balance +42 *$", text, re.M) and re.search(r"^count +3 *$", text, re.M)
    assert text.strip().endswith("served by n2 (standby, lag 4); asked n1, 1 hop")


def test_pretty_partial_scan_says_so_and_prints_the_next_cursor() -> None:
    row = {"key": "100001", "partition": 0, "value": ROW}
    text = render_text("scan", {"status": "PARTIAL", "rows": [row], "missing_partitions": [1],
                                "next_cursor": "abc", "served_by": "n1", "asked": "n1",
                                "hops": 2})
    assert "PARTIAL: partitions [1] had no replica able to answer" in text
    assert "more: --cursor abc" in text
    header, _, first = text.splitlines()[:3]
    assert header.split() == ["key", "┃", "partition", "┃", "account", "┃", "balance", "┃",
                              "count", "┃", "last_update"]
    assert [c.strip() for c in first.split("│")] == ["100001", "0", "100001", "42", "3",
                                                     "1700000000000"]


def test_windows_of_a_key(monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    windows = [{"store": "s1", "type": "GENERAL", "window_start": 60_000 * i,
                "window_end": 60_000 * (i + 1), "count": i} for i in (1, 2)]
    body = {"status": "OK", "view": "order_counts_1m", "key": "s1|GENERAL", "partition": 0,
            "from": 0, "to": 1 << 62, "windows": windows, "served_by": NODE,
            "role": "active", "lag": 0}
    t = FakeCluster({"/v1/views/order_counts_1m/keys/s1|GENERAL/windows": (200, body, 0)})
    assert run_cli(monkeypatch, t, ["query", "order_counts_1m", "s1|GENERAL", "--windows",
                                    "--max-lag", "3"]) == 0
    out = capsys.readouterr().out
    assert "/v1/views/order_counts_1m/keys/s1|GENERAL/windows?from=0&max_lag=3" in t.seen
    assert "2 windows of s1|GENERAL (partition 0)" in out and "120000" in out


@pytest.mark.parametrize(("key", "raw"), [("dir/a1", "dir%2Fa1"), ("..", "%2E%2E"),
                                          ("s|t", "s%7Ct"), ("\udcff", "%ED%B3%BF")])
def test_any_key_is_sent_percent_encoded_whole(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               key: str, raw: str) -> None:
    """``..`` once went to /v1/views/balances (an HTTP client resolves dot segments); a
    byte that is not UTF-8 in the argument (a lone surrogate in argv) raised in the
    client. Each now travels as one segment and the node's answer is printed."""
    seen: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        if request.url.path in ("/v1/views", "/v1/cluster"):
            return FakeCluster({}).handle(request)
        if b"%ED" in request.url.raw_path:
            return httpx.Response(400, json={"code": "BAD_REQUEST", "detail": "not UTF-8"})
        return httpx.Response(200, json={"view": "balances", "key": key, "partition": 0,
                                         "value": ROW})

    code = run_cli(monkeypatch, httpx.MockTransport(handle), ["query", "balances", key, "--json"])
    assert f"/v1/views/balances/keys/{raw}".encode() in seen
    if raw.startswith("%ED"):
        assert code == 1 and "400 BAD_REQUEST: not UTF-8" in capsys.readouterr().err
    else:
        assert code == 0 and json.loads(capsys.readouterr().out)["key"] == key
