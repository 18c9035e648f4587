"""The cluster's part of a node's ``/metrics``: what its coordinator counted (read when
scraped; ``serving/http/metrics.py`` renders the document)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, Metric

if TYPE_CHECKING:
    from streamiq.serving.cluster.peers import Peers
    from streamiq.serving.cluster.traffic import Traffic

__all__ = ["coordinator_metrics"]


def coordinator_metrics(t: Traffic, peers: Peers) -> Iterator[Metric]:
    """The queries' latency (when recorded) and the traffic between nodes: answers
    relayed, refused, asked again at another cut, replies from peers, hedges."""
    if t.latency is not None:
        yield t.latency.family("streamiq_request_duration_seconds",
                               "Queries answered, by query type and how served")
    fwd = CounterMetricFamily("streamiq_forwarded_answers", "Answers relayed from an owner",
                              labels=["peer"])
    for peer, n in sorted(t.forwarded.items()):
        fwd.add_metric([peer], n)
    yield fwd
    yield CounterMetricFamily("streamiq_unavailable_answers",
                              "Queries no replica could answer (503)", value=t.unavailable)
    yield CounterMetricFamily("streamiq_cut_retries", "Consistent reads asked again at a "
                              "lower or newer cut of the input", value=t.cut_moved)
    yield CounterMetricFamily("streamiq_peer_replies", "Replies received from peers (the "
                              "peer protocol)", value=peers.hop.answered())
    hedging = peers.hedging
    sent = CounterMetricFamily("streamiq_hedges_sent", "Requests also sent to another replica "
                               "because the first had not answered within its hedge delay",
                               labels=["query"])
    won = CounterMetricFamily("streamiq_hedges_won", "Hedges that answered first",
                              labels=["query"])
    for kind in sorted(hedging.sent):
        sent.add_metric([kind], hedging.sent[kind])
        won.add_metric([kind], hedging.won.get(kind, 0))
    yield sent
    yield won
