"""Membership topics rotate: nodes keep hearing each other, old topics are deleted.

Sped up: a 2 s membership period instead of 60 s, so a few seconds cover several
epochs (the same code path a long-running cluster takes once a minute).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from changelog import produce_rows
from procs import HTTP
from topicjunk import JUNK, health, members, produce, reasons, until

from streamiq.kafka.admin import ensure_topics, topic_names
from streamiq.routing.epochs import EpochTopics
from streamiq.routing.membership import SIGNATURE_HEADER, members_topic, sign
from streamiq.views.bank import BALANCES
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG, progress_topic

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
        seen = [len(HTTP.get(f"http://127.0.0.1:{p}/v1/cluster").json()["nodes"])
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
            nodes = HTTP.get(f"http://127.0.0.1:{p}/v1/cluster").json()["nodes"]
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


def test_junk_on_the_members_epoch_and_progress_topics_is_skipped_by_reason(
        cluster: Any) -> None:
    """Signed junk (it passes the signature, so the parser meets it) on the current and
    next epochs' members topics, and junk on the progress topic: every node counts
    each record under a reason, keeps its peers, stays ready and answers."""
    conf = {"bootstrap.servers": cluster.bootstrap}
    changelog = cluster.topic(BALANCES.changelog_topic)
    ensure_topics(conf, {changelog: 3})
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(30)]
    produce_rows(cluster.bootstrap, changelog, BALANCES, rows)
    progress = cluster.topic(progress_topic(cluster.name))
    ensure_topics(conf, {progress: 1}, config=PROGRESS_TOPIC_CONFIG)
    ports = [port for port, _ in cluster.nodes(2, "bank")]
    endpoints = sorted(f"127.0.0.1:{p}" for p in ports)
    until(lambda: all(members(p) == endpoints for p in ports), "both members seen by both")
    secret = cluster.secret.encode()
    epochs = EpochTopics(cluster.topic(members_topic(cluster.name)), 60.0)
    current, following = epochs.ahead(time.time())  # the nodes made both topics

    def junk(topic: str) -> None:
        produce(cluster.bootstrap, topic, JUNK,
                headers=lambda v: [(SIGNATURE_HEADER, sign(secret, v))])

    def counted(p: int) -> bool:
        m, g = reasons(p, "membership"), reasons(p, "progress")
        return (m.get("not_json", 0) >= 2 * 4 and m.get("bad_heartbeat", 0) >= 2
                and m.get("not_object", 0) >= 2
                and g.get("too_large", 0) >= 4 and g.get("not_json", 0) >= 1)

    junk(current)
    produce(cluster.bootstrap, progress, JUNK)
    # A listener assigns the next epoch's topic from its end, an offset librdkafka
    # resolves after the assignment (heartbeats repeat, so nothing that matters is
    # missed): junk sent just after the nodes start can land before that end and go
    # unread. So the next epoch's topic gets the junk again until the nodes count it: a
    # second copy of every reason can only come from it (the current topic had one).
    for _ in range(12):
        junk(following)
        with contextlib.suppress(AssertionError):
            until(lambda: all(counted(p) for p in ports), "junk counted", timeout=10)
            break
    until(lambda: all(counted(p) for p in ports), "every junk record counted by reason",
          show=lambda: [health(p)["skip_reasons"] for p in ports])
    for p in ports:
        doc = health(p)
        assert doc["ready"] and doc["faults"] == {}, doc  # no part crashed on a record
        assert members(p) == endpoints
        for row in rows:
            r = HTTP.get(f"http://127.0.0.1:{p}/v1/views/balances/keys/{row['account']}")
            assert r.status_code == 200 and r.json()["value"] == row, r.text
