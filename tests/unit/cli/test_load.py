"""streamiq load: repeatable writes, pacing, totals and positions, failures."""

from __future__ import annotations

import io
import itertools
import json
import re
from typing import Any

import httpx
import pytest
from rich.console import Console

from streamiq.cli import load
from streamiq.cli.common import CliError
from streamiq.cli.main import build_parser, main
from streamiq.cli.workload import Pacer, Totals, Write, bank_writes, order_writes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pacer_spaces_writes_by_one_over_rate() -> None:
    clock = Clock()
    pacer = Pacer(10, clock)
    assert [round(pacer.wait(), 6) for _ in range(4)] == [0.0, 0.1, 0.2, 0.3]
    clock.now += 0.4  # every slot taken so far is due
    assert round(pacer.wait(), 6) == 0.0


def test_pacer_catches_up_at_most_one_second_of_writes() -> None:
    clock = Clock()
    pacer = Pacer(10, clock)
    pacer.wait()
    clock.now += 0.5  # 0.5 s behind: the missed slots go out at once
    assert [pacer.wait() for _ in range(5)] == [0.0] * 5
    clock.now += 30  # far behind: start over from now, no burst of 300
    assert [round(pacer.wait(), 6) for _ in range(3)] == [0.0, 0.1, 0.2]


def test_rate_zero_never_waits() -> None:
    pacer = Pacer(0, Clock())
    assert {pacer.wait() for _ in range(100)} == {0.0}


def test_same_seed_same_writes() -> None:
    first = list(itertools.islice(bank_writes(7, 5), 50))
    assert first == list(itertools.islice(bank_writes(7, 5), 50))
    assert first != list(itertools.islice(bank_writes(8, 5), 50))
    assert {w.key for w in first} <= {str(100001 + i) for i in range(5)}
    assert all(w.path == f"/account/{w.key}" and w.params == {"amount": w.amount}
               for w in first)


def test_orders_are_valid_with_unique_ids() -> None:
    orders = list(itertools.islice(order_writes(3, 4), 200))
    assert len({w.body["order_id"] for w in orders if w.body}) == 200
    for w in orders:
        assert w.body is not None and w.body["type"] in ("GENERAL", "RESTAURANT")
        assert 1 <= w.body["amount"] <= 100 and w.key == f"{w.body['store']}|{w.body['type']}"


def test_totals_add_up_per_key_and_position_covers_every_write() -> None:
    t = Totals("balance")
    for key, amount, part, offset in [("a", 5, 0, 3), ("b", -2, 1, 9), ("a", 7, 0, 1)]:
        t.ok(Write("/", None, None, key, amount),
             {"topic": "tx", "partition": part, "offset": offset,
              "position": f"tx:{part}:{offset}"})
    t.fail("HTTP 503")
    t.fail("HTTP 500")
    assert t.keys == {"a": {"count": 2, "balance": 12}, "b": {"count": 1, "balance": -2}}
    assert t.position == "tx:0:3,tx:1:9" and t.last_position == "tx:0:1"
    assert (t.sent, t.failed, t.first_error) == (3, 2, "HTTP 503")


class FakeIngest:
    """Answers like the ingest service; every ``fail_every``-th write answers 503."""

    def __init__(self, topics: list[str], fail_every: int = 0) -> None:
        self.topics = topics
        self.fail_every = fail_every
        self.calls = 0
        self.written: dict[str, float] = {}
        self.ends: dict[int, int] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "topics": self.topics})
        self.calls += 1
        if self.fail_every and self.calls % self.fail_every == 0:
            return httpx.Response(503, json={"status": "PRODUCE_FAILED"})
        if self.fail_every and self.calls % self.fail_every == 1 and self.calls > 1:
            return httpx.Response(200, text="<html>a proxy's page</html>")
        if request.url.path == "/orders":
            body = json.loads(request.content)
            key, amount, topic = f"{body['store']}|{body['type']}", body["amount"], "orders"
        else:
            key = request.url.path.rsplit("/", 1)[1]
            amount, topic = int(request.url.params["amount"]), "bank-transactions"
        self.written[key] = self.written.get(key, 0) + amount
        part = sum(key.encode()) % 3
        self.ends[part] = offset = self.ends.get(part, -1) + 1
        return httpx.Response(200, json={"topic": topic, "partition": part, "offset": offset,
                                         "position": f"{topic}:{part}:{offset}"})


def run_load(argv: list[str], ingest: FakeIngest) -> int:
    args = build_parser().parse_args(["load", *argv, "--rate", "0", "--json"])
    return load.run(args, transport=httpx.MockTransport(ingest))


def test_bank_run_reports_what_the_ingest_acknowledged(
        capsys: pytest.CaptureFixture[str]) -> None:
    ingest = FakeIngest(["bank-transactions"])
    assert run_load(["bank", "--count", "40", "--keys", "4", "--seed", "5"], ingest) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sent"], doc["failed"], doc["seed"], doc["view"]) == (40, 0, 5, "balances")
    assert {k: v["balance"] for k, v in doc["totals"].items()} == ingest.written
    assert sum(v["count"] for v in doc["totals"].values()) == 40 == ingest.calls
    assert doc["position"] == ",".join(f"bank-transactions:{p}:{o}"
                                       for p, o in sorted(ingest.ends.items()))


def test_orders_run_totals_revenue_per_store_and_type(
        capsys: pytest.CaptureFixture[str]) -> None:
    ingest = FakeIngest(["orders"])
    assert run_load(["orders", "--count", "25", "--seed", "1", "--concurrency", "3"],
                    ingest) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {k: v["revenue"] for k, v in doc["totals"].items()} == pytest.approx(ingest.written)


def test_failed_writes_are_counted_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    ingest = FakeIngest(["bank-transactions"], fail_every=5)
    with pytest.raises(CliError, match="3 of 10 writes failed; first: HTTP 503"):
        run_load(["bank", "--count", "10", "--concurrency", "1"], ingest)
    doc = json.loads(capsys.readouterr().out)  # 5th and 10th: 503; 6th: not JSON
    assert (doc["sent"], doc["failed"]) == (7, 3)
    assert sum(t["count"] for t in doc["totals"].values()) == 7


def test_ingest_without_the_scenario_is_one_clear_error() -> None:
    with pytest.raises(CliError, match=r"does not take orders writes .*bank-transactions"):
        run_load(["orders"], FakeIngest(["bank-transactions"]))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--count", "0", "argument --count: must be at least 1, got 0"),
    ("--rate", "-1", "argument --rate: must be at least 0, got -1"),
    ("--concurrency", "x", "argument --concurrency: not a number: 'x'"),
    ("--keys", "0", "argument --keys: must be at least 1"),
])
def test_bad_values_are_usage_errors_naming_the_flag(
        flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["load", "bank", flag, value])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_unreachable_ingest_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["load", "bank", "--ingest", "127.0.0.1:1"])
    assert exc.value.code == 1
    assert capsys.readouterr().err == ("streamiq: error: cannot reach the ingest service at "
                                       "http://127.0.0.1:1 (connection refused or host "
                                       "unreachable)\n")


def test_human_report_names_totals_and_positions() -> None:
    doc: dict[str, Any] = {
        "scenario": "bank", "view": "balances", "seed": 3, "sent": 2, "failed": 0,
        "elapsed_s": 1.0, "interrupted": False, "last_position": "tx:0:1",
        "position": "tx:0:1,tx:1:0", "key_column": "account",
        "totals": {"100001": {"count": 2, "balance": 30}}}
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(load.report(doc))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines[0] == "load bank: 2 writes acknowledged in 1.0 s (2.0/s), 0 failed, seed 3"
    assert lines[1] == "totals written (view balances)"
    assert re.match(r"^100001 +│ +2 │ +30$", lines[4])
    assert lines[-2:] == ["last position: tx:0:1", "position of every write: tx:0:1,tx:1:0"]
