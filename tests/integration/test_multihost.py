"""Nodes on three separate test hosts (network namespaces joined by veth links), the
broker on a fourth (the root namespace), nothing on loopback.

Each node binds and advertises its own host's address; the third binds 0.0.0.0 and
advertises a service address that is not the one it was given as its host (as behind
a Kubernetes service). Lookups for every key answer right from every node, forwarded
across hosts, and the cluster map names only advertised addresses. The namespaces,
links and bridge are removed even when the test fails.
"""

from __future__ import annotations

import sys
import time
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
    h = Hosts(3)
    try:
        yield h
    finally:
        h.close()
        assert h.leftovers() == [], h.leftovers()


def test_three_hosts_answer_every_key_across_hosts(hosts: Hosts, procs: Any,
                                                   tmp_path: Path) -> None:
    from procs import free_port

    broker = EmbeddedBroker(hosts.gateway, free_port()).start()
    try:
        _three_hosts(hosts, procs, tmp_path, broker.bootstrap_servers)
    finally:
        broker.stop()


def _three_hosts(hosts: Hosts, procs: Any, tmp_path: Path, bootstrap: str) -> None:
    topic = f"mh-{BALANCES.changelog_topic}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(60)]
    produce_rows(bootstrap, topic, BALANCES, rows)
    service = hosts.add_address(2, 200)  # the third host's service address
    binds = [hosts.addresses[0], hosts.addresses[1], "0.0.0.0"]
    advertised = [f"{hosts.addresses[0]}:{PORT}", f"{hosts.addresses[1]}:{PORT}",
                  f"{service}:{PORT}"]
    common = ["--bootstrap-servers", bootstrap, "--cluster", "mh", "--topic-prefix", "mh-",
              "--app", "bank", "--no-auth", "--cluster-secret", "mh-secret",
              "--log-level", "info"]
    nodes = [procs("node", [*common, "--host", binds[i], "--port", str(PORT),
                            "--advertised", advertised[i],
                            "--state-dir", str(tmp_path / f"host{i}")],
                   name=f"node-host{i}", prefix=hosts.command(i, []))
             for i in range(3)]
    for ad, p in zip(advertised, nodes, strict=True):
        p.wait_ready(f"http://{ad}/health", 90)
    deadline = time.monotonic() + 90
    with httpx.Client(timeout=10) as c:
        for ad in advertised:  # every node sees the three, each active where assigned
            while True:
                meta = c.get(f"http://{ad}/v1/cluster").json()
                parts = meta["views"]["balances"].values()
                if {n["endpoint"] for n in meta["nodes"]} == set(advertised) and all(
                        pv["replicas"] and pv["replicas"][0]["address"] == pv["assigned"][0]
                        for pv in parts):
                    break
                assert time.monotonic() < deadline, meta
                time.sleep(0.3)
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
