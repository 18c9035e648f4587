"""``streamiq.sink(df)``: write any keyed streaming frame to a view, checked at ``start()``.

::

    import streamiq
    (streamiq.sink(counts)                        # instead of counts.writeStream.format(...)
       .option("view", "page_views")
       .option("key", "user_id")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .outputMode("update")
       .option("checkpointLocation", "/ck/page_views")
       .start())

Why a builder of its own rather than ``df.writeStream.format("streamiq")`` alone,
measured on PySpark 4.3 (docs/sink.md):

* **Errors at start().** ``DataStreamWriter.start()`` calls no Python code of a data
  source. Measured with a data source raising ``ValueError("option 'fail': ...")``
  (append mode, rate source): raised in ``__init__``, ``start()`` returned after 0.67 s
  and the query failed 4.5 s after start; raised in ``streamWriter()``, ``start()``
  returned and the query failed 0.4 s later; ``schema()`` is never called for a write.
  In each case the error reached the user only through ``awaitTermination()`` /
  ``query.exception()`` (``PYTHON_DATA_SOURCE_ERROR``). So
  :meth:`SinkWriter.start` validates on the driver first: options (each error names
  the option), output mode, key columns against the frame's schema, the changelog
  topic, and the catalog (an incompatible description of the view raises, naming
  the view and the difference), and only then starts the query.
* **Update mode.** Spark refuses update mode for Python streaming writers ("does not
  support Update mode"), and a keyed aggregate's changed rows *are* update mode. So an
  update-mode query writes each micro-batch from ``foreachBatch`` through the same
  data source's batch writer (:class:`~streamiq.pipeline.datasource.ChangelogBatchWriter`:
  rows on executors, markers in ``commit`` on the driver). Append mode uses the
  streaming writer itself (``format("streamiq")``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.datasource import FORMAT
from streamiq.pipeline.publish import prepare
from streamiq.pipeline.session import register_formats
from streamiq.pipeline.sink_options import check_output_mode, parse_sink_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["ChangelogBatches", "SinkWriter", "sink"]


class ChangelogBatches:
    """``foreachBatch`` function: one micro-batch through the ``streamiq`` batch writer."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        (df.write.format(FORMAT).mode("append").options(**self.options)
         .option("batchId", str(batch_id)).save())


class SinkWriter:
    """``df.writeStream``'s builder methods for the streamiq sink; ``start()`` validates."""

    def __init__(self, df: DataFrame) -> None:
        self._df = df
        self._options: dict[str, str] = {}
        self._mode = "update"
        self._trigger: dict[str, Any] = {}
        self._name: str | None = None

    def option(self, key: str, value: Any) -> SinkWriter:
        self._options[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return self

    def options(self, **options: Any) -> SinkWriter:
        for k, v in options.items():
            self.option(k, v)
        return self

    def outputMode(self, mode: str) -> SinkWriter:
        self._mode = mode
        return self

    def trigger(self, **trigger: Any) -> SinkWriter:
        self._trigger = trigger
        return self

    def queryName(self, name: str) -> SinkWriter:
        self._name = name
        return self

    def start(self) -> StreamingQuery:
        """Validate everything on the driver (ValueError naming the option), create the
        changelog topic, publish the view to the catalog, then start the query."""
        if not self._df.isStreaming:
            raise ValueError("streamiq.sink needs a streaming DataFrame (spark.readStream)")
        mode = check_output_mode(self._mode)
        opts = parse_sink_options(self._options, self._df.schema)
        if opts.checkpoint is None:
            raise ValueError("option 'checkpointLocation' must be specified (the markers' "
                             "input offsets are read from the query's offset log)")
        if opts.batch_id is not None:
            raise ValueError("option 'batchId' is set by the sink itself")
        prepare(opts, self._df.schema)
        register_formats(self._df.sparkSession)
        w = self._df.writeStream.outputMode(mode).option("checkpointLocation", opts.checkpoint)
        if self._trigger:
            w = w.trigger(**self._trigger)
        if self._name:
            w = w.queryName(self._name)
        if mode == "append":
            return w.format(FORMAT).options(**self._options).start()
        return w.foreachBatch(ChangelogBatches(self._options)).start()


def sink(df: DataFrame) -> SinkWriter:
    """The streamiq sink's writer for a streaming frame (see the module's example)."""
    return SinkWriter(df)
