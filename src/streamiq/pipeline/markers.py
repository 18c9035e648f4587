"""Markers: after each batch, every changelog partition is told the input offsets it reflects.

The marker of batch ``n`` names the end offsets of ``n`` as the query's offset log
records them (the write-ahead record of exactly the range the batch read), so a
replayed batch writes an identical marker: ``{"batch_id", "offsets": {topic:
{partition: next_offset}}}`` (header ``streamiq-marker``, key
:data:`~streamiq.views.base.MARKER_KEY`; ``views/base.py``). The driver writes it once
Spark reports the batch done (a ``StreamingQueryListener``'s progress event, after the
batch's commit): Spark's Kafka sink flushed every row of the batch before its tasks
committed, so on every changelog partition the marker follows the batch's rows. A
marker missed by a crash is made up by the next batch's, and by the one written for
the last committed batch when the query starts again (:meth:`Markers.committed`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from streamiq.kafka.clientlog import logged, serve_logs
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value

__all__ = ["Markers", "batch_offsets", "last_committed", "producer_conf"]


def producer_conf(kafka: Mapping[str, Any]) -> dict[str, Any]:
    """Idempotent, Java-compatible partitioning, low linger (latency over batching)."""
    conf = dict(kafka)
    conf.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
                 "linger.ms": conf.get("linger.ms", 1), "client.id": "streamiq-pipeline"})
    return conf


def _read_text(path: str) -> str | None:
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        p = Path(parsed.path if parsed.scheme else path)
        return p.read_text() if p.exists() else None
    from pyarrow import fs  # a non-local checkpoint (HDFS, S3, GCS): Arrow's filesystems

    filesystem, inner = fs.FileSystem.from_uri(path)
    if filesystem.get_file_info(inner).type == fs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(inner) as f:
        return bytes(f.read()).decode()


def batch_offsets(checkpoint: str, batch_id: int) -> dict[str, dict[str, int]] | None:
    """End offsets of batch ``batch_id`` from the query's offset log (None if absent).

    The log holds a version line, the batch's metadata and one line per source; the
    Kafka-shaped ones (``{topic: {partition: offset}}``) are merged and others (a rate
    source's number, a file source's log index) are left out. Negative offsets (an
    untouched partition still at "earliest") become 0: "every record before 0 is
    reflected" is true and is what a reader needs.
    """
    text = _read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines()[2:]:
        raw = json.loads(line) if line.strip() not in ("", "-") else None
        if isinstance(raw, dict) and all(isinstance(v, dict) for v in raw.values()):
            for t, parts in raw.items():
                out.setdefault(t, {}).update({p: max(int(o), 0) for p, o in parts.items()})
    return out


def _newest(checkpoint: str, log: str) -> int | None:
    """The newest batch id in the query's ``log`` folder (None: none, or not local)."""
    parsed = urlparse(checkpoint)
    if parsed.scheme not in ("", "file"):
        return None
    folder = Path(parsed.path if parsed.scheme else checkpoint) / log
    done = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] \
        if folder.is_dir() else []
    return max(done) if done else None


def last_committed(checkpoint: str) -> int | None:
    """The newest batch the query's commit log records (None: none, or not local)."""
    return _newest(checkpoint, "commits")


class Markers:
    """Writes the markers of one changelog topic (one idempotent producer, made on first
    use; safe from the listener's thread and the pipeline's)."""

    def __init__(self, kafka: Mapping[str, Any], topic: str, partitions: int,
                 checkpoint: str) -> None:
        self.kafka = dict(kafka)
        self.topic = topic
        self.partitions = partitions
        self.checkpoint = checkpoint
        self._producer: Any = None
        self._lock = threading.Lock()
        self.last: int | None = None  # the newest batch whose markers were written
        serve_logs(self._serve)

    def _serve(self) -> None:
        """The producer's log lines as they come (not at the next batch's flush)."""
        if self._lock.acquire(blocking=False):  # else batch() is flushing: it serves them
            try:
                if self._producer is not None:
                    self._producer.poll(0)
            finally:
                self._lock.release()

    def batch(self, batch_id: int, timeout: float = 60.0) -> dict[str, dict[str, int]]:
        """One marker per partition naming the input offsets of ``batch_id`` (flushed);
        none for a batch Spark already purged from its offset log (a newer one's come)."""
        offsets = batch_offsets(self.checkpoint, batch_id)
        newest = _newest(self.checkpoint, "offsets") if offsets is None else None
        if offsets is None and newest is not None and newest > batch_id:
            # Spark purged it (it keeps minBatchesToRetain): the handler fell that many
            # batches behind, and a newer batch's marker, which is still to come, covers it
            return {}
        if offsets is None:
            raise RuntimeError(f"topic {self.topic}: no offset log entry for batch {batch_id} "
                               f"under {self.checkpoint}")
        marker = marker_value(batch_id, {t: {int(q): o for q, o in po.items()}
                                         for t, po in offsets.items()})
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

        with self._lock:
            if self._producer is None:
                from confluent_kafka import Producer

                self._producer = Producer(logged(producer_conf(self.kafka)))
            for part in range(self.partitions):
                self._producer.produce(self.topic, value=marker, key=MARKER_KEY, partition=part,
                                       headers=[(MARKER_HEADER, b"1")], on_delivery=delivered)
            left = self._producer.flush(timeout)
            if left or errors:
                raise RuntimeError(f"topic {self.topic}: markers of batch {batch_id} not "
                                   f"written ({left} undelivered; {errors[:3]})")
            self.last = batch_id if self.last is None else max(self.last, batch_id)
        return offsets

    def close(self) -> None:
        """Let the producer go (its query stopped): nothing polls it any more, and a
        broker gone after the stop prints nothing. A later batch makes a new one."""
        with self._lock:
            self._producer = None

    def committed(self) -> int | None:
        """Write the markers of the last batch the checkpoint committed (a restart: its
        markers may have been lost with the process); the batch, or None."""
        last = last_committed(self.checkpoint)
        if last is not None and batch_offsets(self.checkpoint, last) is not None:
            self.batch(last)
        return last
