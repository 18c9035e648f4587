"""Membership topics rotate: nodes keep hearing each other, old topics are deleted.

Sped up: a 2 s membership period instead of 60 s, so a few seconds cover several
epochs (the same code path a long-running cluster takes once a minute).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from streamiq.kafka.admin import topic_names
from streamiq.routing.membership import members_topic

pytestmark = pytest.mark.integration

PERIOD_S = 2


def test_nodes_hear_each_other_across_epochs_and_old_topics_go(cluster: Any) -> None:
    extra = ["--membership-period-s", str(PERIOD_S), "--standby-replicas", "0"]
    ports = [port for port, _ in cluster.nodes(2, "bank", extra)]
    base = cluster.topic(members_topic(cluster.name)) + "-"
    conf = {"bootstrap.servers": cluster.bootstrap}
    # every node sees both members once both have heartbeated
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = [len(httpx.get(f"http://127.0.0.1:{p}/v1/cluster").json()["nodes"])
                for p in ports]
        if seen == [2, 2]:
            break
        time.sleep(0.2)
    assert seen == [2, 2]
    epochs_seen: set[int] = set()
    most_topics = 0
    end = time.monotonic() + 5 * PERIOD_S  # several epoch changes
    while time.monotonic() < end:
        for p in ports:  # never a moment when a node lost its peer
            nodes = httpx.get(f"http://127.0.0.1:{p}/v1/cluster").json()["nodes"]
            assert len(nodes) == 2, f"node {p} lost its peer at an epoch change: {nodes}"
        mine = [t for t in topic_names(conf) if t.startswith(base)]
        epochs_seen.update(int(t[len(base):]) for t in mine)
        most_topics = max(most_topics, len(mine))
        time.sleep(0.1)
    assert len(epochs_seen) >= 4, epochs_seen  # topics were rotated
    # bounded by a constant: epochs e-2..e+1 are kept (e-2 for a node whose clock is
    # one epoch behind), and at an epoch change the topic that just expired lives until
    # a keeper's next round (a quarter period) while another keeper may already have
    # made the new next one
    assert most_topics <= 5, most_topics
    now_epoch = int(time.time() // PERIOD_S)
    left = sorted(int(t[len(base):]) for t in topic_names(conf) if t.startswith(base))
    assert left and min(left) >= now_epoch - 3, (left, now_epoch)
