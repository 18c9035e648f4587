"""``streamiq``: a PySpark 4 Python data source writing a view's changelog.

Both of its writers write rows in ``write`` on executors (each task flushes its rows
before it returns its commit message) and markers in ``commit`` on the driver, which
Spark calls only after every task of the micro-batch returned, so on every changelog
partition a batch's marker follows the batch's rows. Rows and markers come from
:mod:`streamiq.pipeline.sink`, the one changelog writer.

* :class:`ChangelogStreamWriter` (``streamWriter``): ``df.writeStream.format("streamiq")``
  in **append** mode. PySpark 4.3's Python streaming writers cannot take **update**
  mode: Spark fails the query with "streamiq does not support Update mode" (its
  ``PythonWrite`` does not implement ``SupportsStreamingUpdateAsAppend``; measured,
  see docs/sink.md). The markers' offsets come from ``<checkpointLocation>/offsets/
  <batchId>``.
* :class:`ChangelogBatchWriter` (``writer``): the batch write that
  ``streamiq.pipeline.sink(df)`` makes from ``foreachBatch`` for every micro-batch of an
  update-mode query, with the micro-batch's id in the internal option ``batchId``.

Spark builds the data source and its stream writer anew twice per micro-batch, in two
Python workers on the driver: once to plan the batch's write tasks and once before
``commit`` (measured: ``__init__`` + ``streamWriter`` logged by the same two reused
PIDs for each of 52 batches). So topic creation and the catalog check
(:func:`~streamiq.pipeline.publish.prepare`) are remembered per process, and paid once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from streamiq.pipeline.publish import changelog_partitions, prepare
from streamiq.pipeline.sink import RowEncoder, produce_markers, produce_rows
from streamiq.pipeline.sink_options import SinkOptions, parse_sink_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["FORMAT", "ChangelogBatchWriter", "ChangelogStreamWriter", "Rows",
           "StreamiqDataSource"]

log = logging.getLogger(__name__)

FORMAT = "streamiq"


class Rows(WriterCommitMessage):
    """A task's commit message: how many rows it wrote."""

    def __init__(self, rows: int) -> None:
        self.rows = rows


class _RowWriter:
    """``write``: a task's rows to the changelog, flushed before the task returns."""

    def __init__(self, opts: SinkOptions, schema: StructType, partitions: int) -> None:
        self.opts = opts
        self.encoder = RowEncoder(schema.fieldNames(), opts.key)
        self.partitions = partitions

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Rows:
        return Rows(produce_rows(self.opts.kafka, self.opts.changelog_topic, self.encoder,
                                 iterator))

    def _markers(self, messages: list[Any], batch_id: int) -> None:
        if self.opts.checkpoint is None:
            raise ValueError("option 'checkpointLocation' must be specified")
        produce_markers(self.opts.kafka, self.opts.changelog_topic, self.partitions,
                        batch_id, self.opts.checkpoint)
        rows = sum(m.rows for m in messages if isinstance(m, Rows))
        log.debug("view %s batch %d: %d rows", self.opts.view, batch_id, rows)


class ChangelogStreamWriter(_RowWriter, DataSourceStreamArrowWriter):
    """Append-mode streaming writes (``df.writeStream.format("streamiq")``)."""

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._markers(messages, batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        log.warning("view %s batch %d aborted: rows written so far are absolute values, "
                    "the batch is redone", self.opts.view, batchId)


class ChangelogBatchWriter(_RowWriter, DataSourceArrowWriter):
    """One micro-batch of an update-mode query, written from ``foreachBatch``."""

    def commit(self, messages: list[Any]) -> None:
        assert self.opts.batch_id is not None
        self._markers(messages, self.opts.batch_id)


class StreamiqDataSource(DataSource):
    """The ``streamiq`` format (options: :mod:`streamiq.pipeline.sink_options`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool
                     ) -> ChangelogStreamWriter:
        if overwrite:
            raise ValueError("outputMode 'complete' is not supported by the streamiq sink: "
                             "use 'update' (streamiq.pipeline.sink) or 'append'")
        opts = parse_sink_options(self.options, schema)
        if opts.checkpoint is None:
            raise ValueError("option 'checkpointLocation' must be specified")
        return ChangelogStreamWriter(opts, schema, prepare(opts, schema).partitions)

    def writer(self, schema: StructType, overwrite: bool) -> ChangelogBatchWriter:
        opts = parse_sink_options(self.options, schema)
        if opts.batch_id is None:
            raise ValueError("option 'batchId' must be specified: batch writes of the "
                             "streamiq format are made by streamiq.pipeline.sink(df) for "
                             "each micro-batch")
        # streamiq.pipeline.sink prepared topic and catalog before the query started
        return ChangelogBatchWriter(opts, schema, changelog_partitions(opts))
