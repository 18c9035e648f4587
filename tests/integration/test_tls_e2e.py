"""TLS through real processes: three nodes serving HTTPS with certificates from files
(a test CA, trustme), calling each other over TLS: lookups forwarded over the lookup
wire and gathered across nodes answer; plain HTTP to a node's port gets no answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from certs import tls_files
from changelog import produce_rows

from streamiq.client import Client
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration


def test_nodes_serve_and_hop_over_tls(cluster: Any, tmp_path: Path) -> None:
    files = tls_files(tmp_path)
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(30)]
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES, rows)
    tls = ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
           "--tls-ca-file", str(files["ca"])]
    ports = [p for p, _ in cluster.nodes(3, extra=tls, ca=str(files["ca"]))]
    cluster.settle(ports, "balances", ca=str(files["ca"]))
    with httpx.Client(verify=str(files["ca"]), timeout=30) as c:
        for port in ports:
            base = f"https://127.0.0.1:{port}"
            hops = set()
            for row in rows:
                r = c.get(f"{base}/v1/views/balances/keys/{row['account']}")
                assert r.status_code == 200 and r.json()["value"] == row, r.text
                hops.add(r.headers["x-streamiq-hops"])
            assert hops == {"0", "1"}  # forwarded ones went to a peer, over TLS
            r = c.get(f"{base}/v1/views/balances/aggregate", params={"agg": "sum(balance)"})
            assert r.json()["groups"] == [{"sum(balance)": sum(range(30))}], r.text
        wire = sum(c.get(f"https://127.0.0.1:{p}/health").json()["peers"]["replies"]
                   for p in ports)
        assert wire > 0  # the peer protocol ran inside TLS
    with pytest.raises(httpx.HTTPError):  # a plaintext client gets no answer
        httpx.get(f"http://127.0.0.1:{ports[0]}/health", timeout=5)
    with Client(f"https://127.0.0.1:{ports[0]}", verify=str(files["ca"])) as client:
        doc = client.get("balances", "a7")
        assert doc is not None and doc["value"]["balance"] == 7, doc
