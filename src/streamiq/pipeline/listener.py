"""Spark's streaming query events as plain dicts on a queue: the pipeline's one listener.

Spark calls a listener on its own thread; the pipeline's driver loop (``runner.poll``)
takes the events from the queue and handles them in order (markers, dead letters,
counters, restarts). A batch that read nothing is not reported.
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.deadletter import METRIC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Events", "listen"]

Events = queue.Queue[dict[str, Any]]


def listen(spark: SparkSession, events: Events) -> Any:
    """Add a listener putting ``spark``'s query events on ``events``; the listener (to
    remove it)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if p.numInputRows == 0:
                return
            metric = p.observedMetrics.get(METRIC)
            events.put({"name": p.name, "batch_id": p.batchId, "records": p.numInputRows,
                        "metric": metric.asDict() if metric is not None else None,
                        "duration_ms": p.batchDuration,
                        "input_rate": p.inputRowsPerSecond,
                        "process_rate": p.processedRowsPerSecond})

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            events.put({"name": None, "terminated": str(event.id),
                        "exception": event.exception})

    listener = _Listener()
    spark.streams.addListener(listener)
    return listener
