"""What a node's live subscriptions may take, and what they did (issue 40).

``Limits``: subscriptions open on this node (``--changes-max-subscriptions``) and per
token (``--changes-max-per-token``, when clients authenticate), refused past them with
429 TOO_MANY_SUBSCRIPTIONS and a JSON problem; counted while open. Metrics of the
node's ``/metrics``: open subscriptions, events sent, coalesced values sent, and change
to delivery (applied to the store, to the event handed to the HTTP server).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streamiq.errors import TooManySubscriptions
from streamiq.metrics import Latency
from streamiq.serving.changelog.feed import Feed
from streamiq.serving.changes.stream import Event

__all__ = ["DELIVERY_BUCKETS", "Limits", "feed_metrics"]

#: seconds, applied to delivered (local changes)
DELIVERY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0)


class Limits:
    """Admission and counts of one node's client subscriptions."""

    def __init__(self, per_node: int, per_token: int, by_token: bool) -> None:
        self.per_node = per_node
        self.per_token = per_token
        self.by_token = by_token  # tokens are told apart (clients authenticate)
        self.open = 0
        self._tokens: Counter[str] = Counter()
        self.sent = 0
        self.coalesced = 0
        self.delivery = Latency(("kind",), DELIVERY_BUCKETS)

    def admit(self, token: str | None) -> Callable[[], None]:
        """Count a new subscription (its release returned), or 429."""
        if self.open >= self.per_node:
            raise TooManySubscriptions(f"this node holds {self.open} subscriptions "
                                       f"(--changes-max-subscriptions)", limit=self.per_node)
        key = (token or "") if self.by_token else None
        if key is not None and self._tokens[key] >= self.per_token:
            raise TooManySubscriptions(f"this token holds {self._tokens[key]} subscriptions "
                                       f"on this node (--changes-max-per-token)",
                                       limit=self.per_token)
        self.open += 1
        if key is not None:
            self._tokens[key] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open -= 1
                if key is not None:
                    self._tokens[key] -= 1
                    if not self._tokens[key]:
                        del self._tokens[key]

        return release

    def sending(self, e: Event) -> None:
        """An event goes to a client: counted, its delay since applied recorded."""
        if e.kind is not None:
            return
        self.sent += 1
        if e.data is not None and b'"coalesced":true' in e.data:
            self.coalesced += 1
        elif e.at is not None:
            self.delivery.observe(("change",), time.monotonic() - e.at)

    def metrics(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("streamiq_subscriptions_open",
                                "Live subscriptions (/changes) open on this node",
                                value=self.open)
        yield CounterMetricFamily("streamiq_subscription_events",
                                  "Change events sent to subscribers", value=self.sent)
        yield CounterMetricFamily("streamiq_subscription_coalesced",
                                  "Events that stood for several changes of a key (a slow "
                                  "reader's newest value)", value=self.coalesced)
        yield self.delivery.family("streamiq_subscription_delivery_seconds",
                                   "Applied to the store to handed to the client (changes "
                                   "read on this node)")


def feed_metrics(feed: Feed) -> Callable[[], Iterator[Metric]]:
    """The subscriptions this node's stores feed (an owner's side of them)."""

    def metrics() -> Iterator[Metric]:
        yield GaugeMetricFamily("streamiq_subscription_feeds",
                                "Subscriptions fed by this node's stores: its clients' "
                                "streams over partitions it holds, and its peers'",
                                value=feed.open)

    return metrics
