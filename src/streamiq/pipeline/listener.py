"""Spark's streaming query events as plain dicts on a queue: the pipeline's one listener.

Spark calls a listener on its own thread; the pipeline's driver loop (``runner.poll``)
takes the events from the queue and handles them in order (markers, dead letters,
counters, restarts). A batch that read nothing is not reported.

Each event is read as its JSON, in one call into the JVM. PySpark's own listener
classes build each progress event field by field (dozens of py4j calls, and a lookup of
``PythonSQLUtils`` through every imported package for each observed metric: a failed
class load that scans every jar); with three views and two dead-letter queries that
listener thread took 9 % of the driver JVM's CPU samples, 6 % in jar scans alone
(docs/design.md, "Micro-batch: where a batch's time went").
"""

from __future__ import annotations

import json
import queue
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.deadletter import METRIC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Events", "listen", "progress_event"]

Events = queue.Queue[dict[str, Any]]


def progress_event(progress: dict[str, Any]) -> dict[str, Any] | None:
    """The pipeline's event of a progress report (Spark's JSON of it, parsed); None for
    a batch that read nothing."""
    records = int(progress.get("numInputRows") or 0)
    if records == 0:
        return None
    return {"name": progress.get("name"), "batch_id": int(progress["batchId"]),
            "records": records, "metric": (progress.get("observedMetrics") or {}).get(METRIC),
            "duration_ms": progress.get("batchDuration"),
            "input_rate": progress.get("inputRowsPerSecond"),
            "process_rate": progress.get("processedRowsPerSecond")}


class _JsonEvents:
    """Spark's Java listener interface (over py4j): each event read as its JSON."""

    def __init__(self, events: Events) -> None:
        self.events = events

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        ev = progress_event(json.loads(jevent.progress().json()))
        if ev is not None:
            self.events.put(ev)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        exc = jevent.exception()
        self.events.put({"name": None, "terminated": jevent.id().toString(),
                         "exception": exc.get() if exc.isDefined() else None})

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(spark: SparkSession, events: Events) -> Any:
    """Add a listener putting ``spark``'s query events on ``events``; the listener (to
    remove it)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        """Registered as PySpark's listeners are, its Java side reading JSON."""

        def __init__(self) -> None:
            jvm = spark.sparkContext._jvm
            assert jvm is not None  # the context is running
            wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
            self._jlistenerobj = wrapper(_JsonEvents(events))

        def onQueryStarted(self, event: Any) -> None:  # never called: the Java side
            pass

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _Listener()
    spark.streams.addListener(listener)
    return listener
