"""A global view (Kafka Streams' GlobalKTable): every node holds all of it and answers
its lookups where they arrive, with no hop; a keyed view beside it stays partitioned."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

MODULE = """
import dataclasses
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import App

STORES = dataclasses.replace(
    BALANCES, name="stores", description="Reference table: a store's name and region.",
    key_columns=("store",), value_columns=("name", "region"), is_global=True)
APP = App(name="global-test", topics=BALANCES.source_topics, views=(BALANCES, STORES))
"""


def test_every_node_answers_a_global_view_itself(cluster: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "siq_global_views.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    stores = dataclasses.replace(BALANCES, name="stores", key_columns=("store",),
                                 value_columns=("name", "region"), is_global=True)
    rows = [{"store": f"s{i}", "name": f"Store {i}", "region": "EU" if i % 2 else "US"}
            for i in range(40)]
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(v.changelog_topic): 3 for v in (stores, BALANCES)})
    produce_rows(cluster.bootstrap, cluster.topic(stores.changelog_topic), stores, rows)
    accounts = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0}
                for i in range(40)]
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES,
                 accounts)
    ports = [p for p, _ in cluster.nodes(3, extra=["--views-module", "siq_global_views",
                                                   "--standby-replicas", "0"])]
    with httpx.Client(timeout=10) as c:
        deadline = time.monotonic() + 60
        for port in ports:  # every node holds every partition of stores, restored
            while True:
                held = c.get(f"http://127.0.0.1:{port}/health").json()["partitions"]
                if sum(s["restored"] for s in held.get("stores", {}).values()) == 3:
                    break
                assert time.monotonic() < deadline, held
                time.sleep(0.2)
        cluster.settle(ports, "balances")  # and the keyed view: one active owner each
        described = c.get(f"http://127.0.0.1:{ports[0]}/v1/views").json()["views"]
        assert {v["name"]: v["global"] for v in described} == {"balances": False,
                                                               "stores": True}
        hops: dict[str, set[str]] = {"stores": set(), "balances": set()}
        for port in ports:
            for row in rows:
                r = c.get(f"http://127.0.0.1:{port}/v1/views/stores/keys/{row['store']}")
                assert r.status_code == 200, r.text
                assert r.json()["value"] == row
                assert r.json()["served_by"] == f"127.0.0.1:{port}"
                hops["stores"].add(r.headers["x-streamiq-hops"])
            for acc in accounts:  # the keyed view beside it: one owner per key
                r = c.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/{acc['account']}")
                assert r.status_code == 200 and r.json()["value"] == acc, r.text
                hops["balances"].add(r.headers["x-streamiq-hops"])
        assert hops == {"stores": {"0"}, "balances": {"0", "1"}}
        r = c.get(f"http://127.0.0.1:{ports[1]}/v1/views/stores/aggregate",
                  params={"group_by": "region"})
        assert r.json()["status"] == "OK", r.text  # each partition read once, all here
        assert r.headers["x-streamiq-hops"] == "0"
        assert r.json()["groups"] == [{"region": "EU", "count(*)": 20},
                                      {"region": "US", "count(*)": 20}]
