"""Views found on the cluster's catalog topic, so a node serves them without user code.

Every pipeline's ``streamiq`` sink publishes its view's description (``ViewSpec``,
``views/catalog.py``) to ``_streamiq-<cluster>-catalog``, keyed by view name. A node
reads that topic from the beginning when it opens (``load``: every view published so
far exists before the node serves) and then follows it (a supervised thread): a new
view is added while the node runs, a compatible change (a value column added) replaces
the description, an incompatible one (key columns, windowing, changelog topic or
partitions changed, a column's type changed) is refused and reported, and the node
goes on serving the view as it was described before. The topic is compacted, and the
last record per key wins here (older ones stay until Kafka's cleaner runs).

Nothing on the topic is trusted: a record that is not a description within bounds
(``views/catalog_bounds.py``), or that claims more than ``max_partitions`` partitions,
or a new view beyond ``max_views``, is skipped and counted per reason (``skips``), and
a description naming a view is also listed in ``refused``; the node goes on serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from streamiq.kafka.offsets import watermarks
from streamiq.kafka.skips import Skip, Skips
from streamiq.supervise import Supervisor
from streamiq.views.catalog import ViewSpec, incompatibility

__all__ = ["Discovery"]

log = logging.getLogger("streamiq.discovery")

_MAX_REFUSED = 256  # refused views remembered (and reported in /health) by name

#: serves a new or compatibly changed description; ValueError: refused (says why)
Serve = Callable[[ViewSpec], None]


class Discovery:
    """Follows the catalog topic: ``serve`` gets every new or compatibly changed view."""

    def __init__(self, kafka_conf: dict[str, Any], topic: str, serve: Serve,
                 supervisor: Supervisor, *, max_partitions: int = 256,
                 max_views: int = 64) -> None:
        self._conf = kafka_conf
        self.topic = topic
        self._serve = serve
        self._max_partitions = max_partitions  # per view
        self._max_views = max_views
        self.specs: dict[str, ViewSpec] = {}  # what is served, per view
        self.refused: dict[str, str] = {}  # view -> why its newest description is refused
        self.skips = Skips(log, "catalog record")  # records not used, per reason
        self._next = 0  # next catalog offset to read
        self._stop = threading.Event()
        self._thread = supervisor.thread("discovery", self._follow, self._stop)

    def load(self, timeout: float = 30.0) -> None:
        """Read the catalog to its end (blocking): the views published so far."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._consumer_conf())
        try:
            _, high = watermarks(consumer, self.topic, 0, timeout)
            consumer.assign([TopicPartition(self.topic, 0, self._next)])
            deadline = time.monotonic() + timeout
            while self._next < high and time.monotonic() < deadline:
                self._apply(consumer.consume(500, 0.2))
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _consumer_conf(self) -> dict[str, Any]:
        return {"group.id": "streamiq-discovery", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", **self._conf}

    def _follow(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._consumer_conf())
        try:
            consumer.assign([TopicPartition(self.topic, 0, self._next)])
            while not self._stop.is_set():
                self._apply(consumer.consume(100, 0.5))
        finally:
            consumer.close()

    def _apply(self, msgs: list[Any]) -> None:
        for m in msgs:
            if m.error():
                continue
            self._next = m.offset() + 1
            self.receive(m.value())

    @property
    def skipped(self) -> int:
        """Catalog records skipped, for any reason."""
        return self.skips.total

    def _refuse(self, name: str, why: str) -> None:
        if name not in self.refused and len(self.refused) >= _MAX_REFUSED:
            return  # a flood of names: counted in skips, not remembered each
        if self.refused.get(name) != why:
            log.error("view %s: refused its description on the catalog (%s); serving it "
                      "as before, if at all", name, why)
        self.refused[name] = why

    def receive(self, raw: bytes | None) -> None:
        """Apply one catalog record: serve it, replace a description, or refuse it (any
        record: one that is not a description within bounds is skipped and counted)."""
        try:
            spec = self._claim(raw)
        except Skip as exc:
            self.skips.skip(exc.reason, str(exc))
            return
        except Exception as exc:  # a record no check foresaw: still never fatal
            self.skips.skip("undecodable", repr(exc))
            return
        old = self.specs.get(spec.name)
        if old == spec:
            self.refused.pop(spec.name, None)
            return
        why = incompatibility(old, spec) if old is not None else None
        if old is None and len(self.specs) >= self._max_views:
            why = f"more than {self._max_views} views (max_views)"
            self.skips.skip("too_many_views", f"view {spec.name}: {why}")
        if why is not None:
            self._refuse(spec.name, why)
            return
        try:
            self._serve(spec)
        except ValueError as exc:
            self._refuse(spec.name, str(exc))
            return
        self.specs[spec.name] = spec
        self.refused.pop(spec.name, None)
        log.info("view %s: %s (changelog %s, %d partitions%s)", spec.name,
                 "serving" if old is None else "description updated", spec.changelog_topic,
                 spec.partitions, ", global" if spec.is_global else "")

    def _claim(self, raw: bytes | None) -> ViewSpec:
        """The description a record holds, if it claims nothing impossible."""
        spec = ViewSpec.from_json(raw if raw is not None else b"")
        if spec.partitions > self._max_partitions:
            why = (f"{spec.partitions} partitions: more than max_view_partitions "
                   f"({self._max_partitions})")
            self._refuse(spec.name, why)
            raise Skip("too_many_partitions", f"view {spec.name}: {why}")
        return spec
