"""Nodes on three separate test hosts (network namespaces joined by veth links), the
broker on another (the root namespace), nothing on loopback; then the same with the
ingest on a fourth host and the pipeline on a Spark standalone cluster (with the
broker) losing a worker.

Each node binds and advertises its own host's address; the third binds 0.0.0.0 and
advertises a service address that is not the one it was given as its host (as behind
a Kubernetes service). Lookups for every key answer right from every node, forwarded
across hosts, and the cluster map names only advertised addresses. The namespaces,
links and bridge are removed even when the test fails.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from netns import Hosts, available

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import EmbeddedBroker
from streamiq.views.bank import BALANCES

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(available() is not None, reason=str(available()))]

PORT = 9001  # every host has its own network: the same port on each


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    h = Hosts(4)  # nodes on 0-2; the ingest on 3 (in the Spark test)
    try:
        yield h
    finally:
        h.close()
        assert h.leftovers() == [], h.leftovers()


@pytest.fixture
def gateway_broker(hosts: Hosts, tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker on the gateway (the root namespace). Tests list it before ``procs``, so
    the parts stop first, while it still answers (not retrying a stopped broker)."""
    from procs import free_ports

    b = EmbeddedBroker(hosts.gateway, free_ports(2), tmp_path / "kafka").start()
    yield b
    b.stop()


@pytest.fixture
def standalone(hosts: Hosts, tmp_path: Path) -> Iterator[Any]:
    """A Spark standalone cluster (a master and two one-core workers) on the gateway,
    stopped after the pipeline (listed before ``procs``)."""
    from spark_cluster import SparkStandalone

    s = SparkStandalone(tmp_path / "spark", hosts.gateway, workers=2).start()
    yield s
    s.stop()


def test_three_hosts_answer_every_key_across_hosts(
        hosts: Hosts, gateway_broker: EmbeddedBroker, procs: Any, tmp_path: Path) -> None:
    _three_hosts(hosts, procs, tmp_path, gateway_broker.bootstrap_servers)


def _start_nodes(hosts: Hosts, procs: Any, tmp_path: Path, common: list[str]
                 ) -> tuple[list[str], list[Any]]:
    """A node on each host: hosts 0 and 1 bind their own address, host 2 binds 0.0.0.0
    and advertises a service address; ready. Returns (advertised, procs)."""
    service = hosts.add_address(2, 200)  # the third host's service address
    binds = [hosts.addresses[0], hosts.addresses[1], "0.0.0.0"]
    advertised = [f"{hosts.addresses[0]}:{PORT}", f"{hosts.addresses[1]}:{PORT}",
                  f"{service}:{PORT}"]
    nodes = [procs("node", [*common, "--no-auth", "--cluster-secret", "mh-secret",
                            "--host", binds[i], "--port", str(PORT),
                            "--advertised", advertised[i],
                            "--state-dir", str(tmp_path / f"host{i}")],
                   name=f"node-host{i}", prefix=hosts.command(i, []))
             for i in range(3)]
    for ad, p in zip(advertised, nodes, strict=True):
        p.wait_ready(f"http://{ad}/health", 90)
    return advertised, nodes


def _settle(advertised: list[str], timeout: float = 90) -> None:
    """Every node sees the three, each partition's assigned owner active."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=10) as c:
        for ad in advertised:
            while True:
                meta = c.get(f"http://{ad}/v1/cluster").json()
                parts = meta["views"]["balances"].values()
                if {n["endpoint"] for n in meta["nodes"]} == set(advertised) and all(
                        pv["replicas"] and pv["replicas"][0]["address"] == pv["assigned"][0]
                        for pv in parts):
                    break
                assert time.monotonic() < deadline, meta
                time.sleep(0.3)


def _common(bootstrap: str, cluster: str) -> list[str]:
    """What every part takes (nodes add --no-auth and --cluster-secret, ingest --no-auth)."""
    return ["--bootstrap-servers", bootstrap, "--cluster", cluster, "--topic-prefix",
            f"{cluster}-", "--app", "bank", "--log-level", "info"]


def _three_hosts(hosts: Hosts, procs: Any, tmp_path: Path, bootstrap: str) -> None:
    topic = f"mh-{BALANCES.changelog_topic}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(60)]
    produce_rows(bootstrap, topic, BALANCES, rows)
    advertised, nodes = _start_nodes(hosts, procs, tmp_path, _common(bootstrap, "mh"))
    _settle(advertised)
    with httpx.Client(timeout=10) as c:
        hops: set[str] = set()
        for ad in advertised:
            for row in rows:
                r = c.get(f"http://{ad}/v1/views/balances/keys/{row['account']}")
                assert r.status_code == 200 and r.json()["value"] == row, (ad, r.text)
                assert r.json()["served_by"] in advertised
                hops.add(r.headers["x-streamiq-hops"])
            agg = c.get(f"http://{ad}/v1/views/balances/aggregate",
                        params={"agg": "sum(balance)"}).json()
            assert agg["groups"] == [{"sum(balance)": sum(range(60))}], agg
        assert hops == {"0", "1"}  # forwarded lookups crossed hosts
    for p in nodes:
        log = p.log()
        assert "127.0.0.1" not in log.replace(f"{sys.executable}", ""), log[-3000:]


def _deposit(ingest: str, rng: random.Random, n: int, expected: Counter[str]) -> None:
    with httpx.Client(base_url=f"http://{ingest}", timeout=30) as c:
        for _ in range(n):
            account, amount = f"acct-{rng.randrange(50)}", rng.randint(-50, 100)
            r = c.post(f"/account/{account}", params={"amount": amount})
            assert r.status_code == 200, r.text
            expected[account] += amount


def _exact_everywhere(advertised: list[str], expected: Counter[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=10) as c:
        for ad in advertised:
            while True:
                got = {a: c.get(f"http://{ad}/account/{a}") for a in expected}
                wrong = {a: (r.status_code, r.text[:80]) for a, r in got.items()
                         if r.status_code != 200 or r.json()["value"]["balance"] != expected[a]}
                if not wrong:
                    break
                assert time.monotonic() < deadline, f"{ad}: {len(wrong)} wrong, e.g. " \
                    f"{list(wrong.items())[:3]}"
                time.sleep(1)


def test_bank_through_a_standalone_spark_cluster_losing_a_worker(
        hosts: Hosts, gateway_broker: EmbeddedBroker, standalone: Any, procs: Any,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline unchanged on a Spark standalone cluster (a master and two workers of
    one core each, from pip's PySpark; executors run the same virtualenv), serving nodes
    on three hosts; a worker killed mid-stream: the query goes on, balances stay exact.
    Real-time mode is refused there (too few slots, one line), micro-batch runs."""
    common = _common(gateway_broker.bootstrap_servers, "sc")
    ingest = f"{hosts.addresses[3]}:8080"  # a host of its own
    procs("ingest", [*common, "--no-auth", "--ingest-host", hosts.addresses[3],
                     "--ingest-port", "8080"], name="ingest", prefix=hosts.command(3, [])
          ).wait_ready(f"http://{ingest}/health", 60)
    advertised, _ = _start_nodes(hosts, procs, tmp_path, common)
    monkeypatch.setenv("SPARK_LOCAL_IP", hosts.gateway)  # the driver, for the executors
    # real-time mode holds a slot per input and shuffle partition (bank: 3 + 3, and 3 for
    # the dead letters' batches); two one-core workers have 2: refused in one line
    refused = procs("pipeline", [*common, "--master", standalone.url, "--checkpoint-dir",
                                 str(tmp_path / "checkpoints"), "--metrics-port", "0"],
                    name="pipeline-refused")
    assert refused.proc is not None and refused.proc.wait(180) == 1
    assert (f"streamiq pipeline: the Spark cluster at {standalone.url} has 2 task slots; "
            "real-time mode holds 9 for these views") in refused.log(), refused.log()[-3000:]
    pipeline = procs("pipeline", [*common, "--master", standalone.url, "--checkpoint-dir",
                                  str(tmp_path / "checkpoints"), "--metrics-port", "0",
                                  "--trigger", "micro-batch"], name="pipeline")
    pipeline.wait_line("pipeline ready", 300)
    apps = standalone.state().get("activeapps")
    assert isinstance(apps, list) and apps and apps[0]["cores"] == 2, standalone.state()
    rng, expected = random.Random(5), Counter[str]()
    _deposit(ingest, rng, 150, expected)
    _exact_everywhere(advertised, expected, 180)

    standalone.kill_worker(0)  # mid-stream: writes keep coming
    _deposit(ingest, rng, 150, expected)
    _exact_everywhere(advertised, expected, 300)
    assert pipeline.alive(), pipeline.log()[-3000:]
    assert standalone.alive_workers() == 1
