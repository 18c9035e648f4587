"""A partition never held, replayed from its changelog in a process of its own (issue 49).

A restore from the changelog is one Python thread's CPU: about 3 µs a record (the
message from librdkafka, the row's checks, a put), so a node that restores all its
partitions in its materializer's thread uses one core, however many it has. A partition
this node never held whose changelog holds ``COPY_MIN_RECORDS`` or more, and that no
peer copied (``cluster/bootstrap.py``), is replayed instead by a child process
(``python -m streamiq.serving.changelog.replayer``), as many at once as the copies'
threads (``AT_ONCE``: one per core and one more), within half the node's store budget
(``--store-memory-mb``) each.

The child reads the changelog from its start to the end the node asked of the broker,
with the materializer's own per-record loop (``records.read_batch``: rows checked,
markers and ticks raising the position, anything else skipped and counted), into a
store of the node's kind in a scratch folder of its own, and exports it as a snapshot
(``Store.export``). The node takes it in as it takes a peer's (``Store.ingest``: digest,
keys and checkpoint checked), counts the child's skips as its own and follows the
changelog from the snapshot's offset. A child that fails, stalls for ``STALL_S``, or
whose snapshot does not check out costs one log line: the materializer replays the
partition as before. Nothing is served from a partition still replaying.

The job goes to the child on its standard input as one JSON line (the Kafka settings
may hold secrets: never on its command line). The child exits when its standard input
closes, so it never outlives the node. It answers on its standard output: a line
``{"offset", "bytes"}`` every ``PROGRESS_S`` and one at the end, ``{"snapshot",
"skips", "read"}``; its log goes to a file in its scratch folder, whose tail the node
logs if it fails.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from streamiq.serving.changelog.markers import InputEnds, kafka_ends
from streamiq.serving.changelog.partition import PartitionState, Replaying
from streamiq.serving.changelog.records import PARTITION_EOF, fetch, read_batch
from streamiq.state import Checkpoint, Snapshot, StoreKind, open_store
from streamiq.views.base import View
from streamiq.views.rows import RowCheck

__all__ = ["PROGRESS_S", "STALL_S", "ReplayFailed", "ReplayJob", "replay", "view_fields"]

log = logging.getLogger("streamiq.materializer")

#: the child reports how far it has read this often
PROGRESS_S = 0.5
#: the child's offset unchanged this long (the broker unreachable, the child hung): it
#: is stopped and the materializer replays the partition
STALL_S = 30.0


class ReplayFailed(Exception):
    """The child did not replay the partition (why, and its log's last lines)."""


@dataclass(frozen=True)
class ReplayJob:
    """One partition to replay: what the child needs, all of it JSON."""

    kafka: dict[str, Any]  # librdkafka settings (scalars only)
    topic: str
    partition: int
    partitions: int | None  # the changelog's partition count, checked per row (None: not)
    view: dict[str, Any]  # ``view_fields``
    end: int  # the changelog's end as the node asked it: read up to there
    store: str  # the node's store kind
    memory_mb: int
    scratch: str  # the child's own folder (its store; removed after)
    into: str  # the snapshot's file

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__).encode()


def view_fields(view: View) -> dict[str, Any]:
    """What a row's checks need of a view, for the child."""
    return {"name": view.name, "key_columns": list(view.key_columns),
            "value_columns": list(view.value_columns), "window": view.window,
            "types": dict(view.types)}


# -- the node's side --
def replay(job: ReplayJob, progress: Replaying, stopped: Callable[[], bool]
           ) -> tuple[Snapshot, Counter[str], int]:
    """Run the child for ``job``: the snapshot it made, its skips per reason and the
    records it read; ``ReplayFailed`` if it made none (the child then stopped)."""
    scratch = Path(job.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    with open(scratch / "replayer.log", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(job.to_json() + b"\n")
        proc.stdin.flush()
        return _follow(proc, proc.stdout, progress, stopped, scratch)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a pipe broken, a bad line
        raise ReplayFailed(f"{exc!r}"[:200] + _tail(scratch)) from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def _follow(proc: subprocess.Popen[bytes], out: IO[bytes], progress: Replaying,
            stopped: Callable[[], bool], scratch: Path) -> tuple[Snapshot, Counter[str], int]:
    last, since = -1, time.monotonic()
    for line in out:
        doc = json.loads(line)
        if "snapshot" in doc:
            snap = Snapshot.of(doc["snapshot"], Path(doc["snapshot"]["path"]))
            try:
                proc.wait(STALL_S)  # it removes its store and exits
            except subprocess.TimeoutExpired:
                log.warning("the replayer of partition %d did not exit", snap.partition)
            return snap, Counter({str(k): int(n) for k, n in doc["skips"].items()}), \
                int(doc["read"])
        progress.offset, progress.bytes = int(doc["offset"]), int(doc["bytes"])
        now = time.monotonic()
        if progress.offset != last:
            last, since = progress.offset, now
        if stopped():
            raise ReplayFailed("the node stops")
        if now - since >= STALL_S:
            raise ReplayFailed(f"no progress for {STALL_S:g} s at offset {last}"
                               + _tail(scratch))
    raise ReplayFailed(f"the replayer exited ({proc.wait()})" + _tail(scratch))


def _tail(scratch: Path) -> str:
    try:
        lines = (scratch / "replayer.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return ("; its log ends: " + " | ".join(lines[-3:]))[:600] if lines else ""


# -- the child's side --
def _run(job: ReplayJob, say: Callable[[dict[str, Any]], None]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    p, end = job.partition, job.end
    check = RowCheck(View.served(**job.view), job.partitions)
    store = open_store(cast(StoreKind, job.store), Path(job.scratch) / "store", job.memory_mb)
    ends = InputEnds(kafka_ends(job.kafka))
    skips: Counter[str] = Counter()

    def skip(offset: int, reason: str, exc: Exception) -> None:
        skips[reason] += 1
        if skips.total() & (skips.total() - 1) == 0:  # 1st, 2nd, 4th...
            log.warning("skipped partition %d offset %d (%s: %s)", p, offset, reason,
                        str(exc)[:200])

    consumer = Consumer({**job.kafka, "group.id": "streamiq-replayer",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "fetch.wait.max.ms": 500, "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(job.topic, p, 0)])  # earliest if it starts later
    st = PartitionState()
    position: dict[str, dict[int, int]] = {}
    read = nbytes = 0
    told = time.monotonic()
    try:
        while st.offset < end:
            records, eof = [], -1
            for m in fetch(consumer):
                if m.error() is None:
                    records.append(m)
                elif m.error().code() == PARTITION_EOF:
                    eof = max(eof, m.offset())
            if records:
                got = read_batch(records, p, st, check, ends, position, skip,
                                 lambda *_: None)
                read += len(records)
                nbytes += sum(len(k) + len(v) for k, v in got.puts if v is not None)
                st.offset = records[-1].offset() + 1
                store.apply(p, got.puts, Checkpoint(offset=st.offset, position=_copy(position)))
            if eof > st.offset:  # the log's last records compacted away: its end reached
                st.offset = eof
                store.apply(p, [], Checkpoint(offset=st.offset, position=_copy(position)))
            if time.monotonic() - told >= PROGRESS_S:
                told = time.monotonic()
                say({"offset": st.offset, "bytes": nbytes})
        snap = store.export(p, Path(job.into))
        if snap is None:  # an empty log: nothing applied, no checkpoint
            store.apply(p, [], Checkpoint(offset=st.offset, position=_copy(position)))
            snap = store.export(p, Path(job.into))
        assert snap is not None
    finally:
        consumer.close()
        store.close()
    say({"snapshot": {**snap.described(), "path": str(snap.path)}, "skips": dict(skips),
         "read": read})


def _copy(position: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    return {t: dict(po) for t, po in position.items()}


def _die_with_parent() -> None:
    """Exit once standard input closes: the node stopped, or died. (Read from the file
    descriptor: a daemon thread blocked in ``sys.stdin`` holds its lock, and the
    interpreter aborts at exit.)"""
    while os.read(0, 1 << 16):
        pass
    os._exit(3)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s replayer %(levelname)s %(message)s")
    job = ReplayJob(**json.loads(sys.stdin.buffer.readline()))
    threading.Thread(target=_die_with_parent, daemon=True).start()
    out = sys.stdout.buffer

    def say(doc: dict[str, Any]) -> None:
        out.write(json.dumps(doc).encode() + b"\n")
        out.flush()

    try:
        _run(job, say)
    except Exception:
        log.exception("replaying partition %d of %s failed", job.partition, job.topic)
        return 1
    finally:
        shutil.rmtree(Path(job.scratch) / "store", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
