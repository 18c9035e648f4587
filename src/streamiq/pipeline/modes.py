"""How the queries run: Spark's real-time mode or micro-batch, and what each needs.

**Real-time mode** (``trigger(realTime=...)``, Spark 4.1+; the default for the views)
runs a query's stages as long-lived tasks that pass each record on as it arrives:
measured here, an event reaches the changelog in 7-15 ms (p50) against 360 ms or more
for the fastest micro-batch. It needs (measured on Spark 4.3.0, docs/design.md "Real-time
mode"):

* Spark's Kafka sink (a Python data source is refused) and operators on its allowlist
  (no Python UDF, no sort-merge join...);
* RocksDB state with checkpoint format v2, and a checkpoint made in that mode;
* a task slot for every input partition and every shuffle partition of every query,
  all the time (``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT`` otherwise): in local mode
  ``local[N]`` is sized from the views (:func:`slots`), a cluster with fewer slots is
  refused with one line;
* ``spark.shuffle.streaming.networkBufferMaxWaitTimeMs`` = 1: at its default (50 ms) a
  shuffled record waited ~30 ms more. Its flush threads (one per shuffle writer) take
  12-18% of a core with nothing to send; :data:`SEND_EACH_ROW` saves most of that and
  costs 1-4 ms of p50 in the pipeline stage (2-5 ms write to visible; docs/design.md,
  "What an idle cluster costs");
* batches: at each batch's end Spark checkpoints, and records arriving meanwhile wait
  0.3-2 s; so batches are long (``--realtime-batch-s``, 300 s by default).

**Micro-batch** as fast as it goes: trigger 0, one shuffle partition, the HDFS-backed
state store (less fixed cost per batch than RocksDB here), Spark's poll of the source
every 10 ms (362 ms p50 event to changelog at best here, against 503 ms with the
earlier settings), the source's fetch wait 10 ms (``queries.MICRO_BATCH_SOURCE``) and
checkpoint files renamed by the OS (``session.SESSION_CONF``): docs/design.md,
"Micro-batch: where a batch's time went".

A view's checkpoint records the mode it was made in (``streamiq.json`` beside Spark's
files, with the input partitions its rows' positions name): the two modes' state
cannot be read by each other, so a view whose mode changed starts a fresh checkpoint
when its input still holds every record (all read again: the changelog is rewritten with
the same values), and is refused with one line otherwise (:func:`prepare_checkpoint`).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["MICRO_BATCH", "REAL_TIME", "REAL_TIME_SQL", "SEND_EACH_ROW", "ModeError",
           "check_slots", "local_master", "prepare_checkpoint", "refusal", "running",
           "session_conf", "shuffle_partitions", "slots", "trigger"]

log = logging.getLogger("streamiq.pipeline")

REAL_TIME = "real-time"
MICRO_BATCH = "micro-batch"
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_STATE = "org.apache.spark.sql.execution.streaming.state."
#: what a real-time query needs of the session: SQL settings (taken when a query starts)
REAL_TIME_SQL = {_PROVIDER: _STATE + "RocksDBStateStoreProvider",
                 "spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
#: the streaming shuffle of a deployment that idles more than it writes (``--spark-config``):
#: each row sent as it comes (a writer sends its buffer once it holds 90% of 1 byte) and
#: the flush threads woken every 100 ms instead of every 1 ms; Spark's warning of each
#: "row larger than the block size 1" is dropped (``stopnoise.EXPECTED_WARNINGS``)
SEND_EACH_ROW = {"spark.shuffle.streaming.networkBufferSize": "1",
                 "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "100"}
_MARK = "streamiq.json"
Input = tuple[str, int]


class ModeError(RuntimeError):
    """A query cannot run in the mode asked (one line saying why and what to do)."""


def session_conf(mode: str) -> dict[str, str]:
    """The pipeline session's settings for ``mode`` (over ``session.SESSION_CONF``)."""
    if mode == REAL_TIME:
        return {**REAL_TIME_SQL, "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "1"}
    # format v1 said outright: the HDFS store refuses v2, which a session that ran a
    # real-time query may still hold (STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED)
    return {_PROVIDER: _STATE + "HDFSBackedStateStoreProvider",
            "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
            "spark.sql.streaming.pollingDelay": "10ms"}


def shuffle_partitions(mode: str, partitions: int) -> int:
    """The aggregation's tasks: one per input partition in real-time mode (each task a
    thread that waits for records), one in micro-batch (each task of a micro-batch is
    scheduled anew: 3 cost more per batch than 1 on 2 cores; issue 37's measurements)."""
    return partitions if mode == REAL_TIME else 1


def trigger(mode: str, batch_s: int, trigger_ms: int) -> dict[str, str]:
    """``writeStream.trigger``'s keyword for ``mode``."""
    if mode == REAL_TIME:
        return {"realTime": f"{batch_s} seconds"}
    return {"processingTime": f"{trigger_ms} milliseconds"}


def slots(inputs: Sequence[int], shuffle: int, spare: int = 0) -> int:
    """Task slots real-time queries hold at once: each query's input partitions
    (``inputs``, one entry per query) plus its ``shuffle`` partitions, and ``spare`` for
    micro-batch work beside them (the dead-letter queries' batches, one per distinct input,
    which may all run at once: with room for one only, a view's next real-time batch
    was once refused CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT)."""
    return sum(n + shuffle for n in inputs) + spare


_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")


def local_master(master: str, needed: int) -> str:
    """``local`` and ``local[*]`` become ``local[needed]`` (real-time tasks are threads
    that mostly wait, not cores); ``local[K]`` with fewer slots is refused."""
    m = _LOCAL.match(master)
    if m is None:
        return master  # a cluster: checked once the session runs (check_slots)
    k = m.group(2)
    if k in (None, "*"):
        return f"local[{needed}{m.group(3) or ''}]"  # ",F": task failures allowed, kept
    if int(k) < needed:
        raise ModeError(f"--master {master} has {k} task slots; real-time mode holds {needed} "
                        f"for these views (every input and shuffle partition of each query): "
                        f"give local[{needed}] (threads, not cores), or --trigger micro-batch")
    return master


def check_slots(spark: SparkSession, needed: int, master: str, wait_s: float = 30.0) -> None:
    """Refuse (ModeError) a cluster with fewer task slots than real-time mode holds
    (executors register after the session starts: their slots are awaited ``wait_s``)."""
    import time

    deadline = time.monotonic() + wait_s
    have = int(spark.sparkContext.defaultParallelism)
    while have < needed and time.monotonic() < deadline:
        time.sleep(0.5)
        have = int(spark.sparkContext.defaultParallelism)
    if have < needed:
        raise ModeError(f"the Spark cluster at {master} has {have} task slots; real-time "
                        f"mode holds {needed} for these views (every input and shuffle "
                        "partition of each query): add executors or cores, or run "
                        "--trigger micro-batch")


def running(spark: SparkSession, query: StreamingQuery) -> bool:
    """Every task of the query's batch runs (a real-time query's stay running: its
    sources read and its stateful stage waits for rows). A job submitted is not enough:
    its tasks start a few hundred ms later, and a write in between waited for them (an
    order's first write after "ready" took 0.52 s where a bank write took 0.15 s)."""
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(str(query.runId))]
    stages = [tracker.getStageInfo(sid) for job in jobs  # the batch running now (an
              if job is not None and job.status == "RUNNING"  # ended one's stages idle)
              for sid in job.stageIds]
    return bool(stages) and all(st is not None and 0 < st.numTasks == st.numActiveTasks
                                for st in stages)


_ALLOWLIST = re.compile(r"The operator\(s\): (?P<ops>.+?) (?:is|are) not in the operator "
                        r"allowlist")
_INPUT = re.compile(r"The input stream (?P<src>\S+) is not supported")
_LIMITATION = re.compile(r"has the following limitation: (?P<why>[^\n.]+)\.")
_SLOTS = re.compile(r"needs (?P<need>\d+) concurrent task slots .*? but only (?P<have>\d+) "
                    r"are currently free")


def refusal(error: Any) -> str | None:
    """Why real-time mode refused a query, in one line (None: it did not refuse it)."""
    text = str(error)
    if "OPERATOR_OR_SINK_NOT_IN_ALLOWLIST" in text:
        m = _ALLOWLIST.search(text)
        ops = ", ".join(o.rsplit(".", 1)[-1] for o in m.group("ops").split(", ")) if m \
            else "an operator"
        return f"real-time mode does not run {ops} (not on its operator allowlist)"
    if "INPUT_STREAM_NOT_SUPPORTED" in text:
        m = _INPUT.search(text)
        source = m.group("src").rsplit(".", 1)[-1] if m else "this source"
        return f"real-time mode does not read {source} (Kafka only)"
    if "STREAMING_REAL_TIME_MODE." in text:
        m = _LIMITATION.search(text)
        return f"real-time mode refuses it: {m.group('why') if m else text.splitlines()[0]}"
    if "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT" in text:
        m = _SLOTS.search(text)
        need = f"{m.group('need')} task slots at once, {m.group('have')} free" if m else \
            "more task slots than the session has free"
        return f"real-time mode needs {need} (a slot per input and shuffle partition)"
    return None


def prepare_checkpoint(path: Path, mode: str, inputs: Sequence[Input],
                       whole_input: Callable[[], bool], positions: bool = True
                       ) -> list[Input]:
    """Make ``path`` a checkpoint of ``mode`` and return the input partitions its rows'
    positions name (``inputs`` for a new one; what an existing one recorded, none for
    one made before the record existed). A checkpoint of the other mode is removed when
    ``whole_input()`` (every input partition still starts at offset 0), else ModeError."""
    mark = path / _MARK
    spark_made = (path / "offsets").is_dir() or (path / "commits").is_dir()
    if mark.is_file():
        info = json.loads(mark.read_text())
        was, kept = str(info.get("trigger")), [(str(t), int(p)) for t, p in info["inputs"]]
    elif spark_made:
        was, kept = MICRO_BATCH, []  # made before streamiq recorded its mode
    else:
        was, kept = mode, list(inputs) if positions else []
    if was != mode:
        if not whole_input():
            raise ModeError(f"{path} was made in {was} mode and the input no longer holds "
                            f"every record (retention deleted some), so a fresh checkpoint "
                            f"would miss them: run --trigger {was}, or remove {path} to "
                            "accept that")
        log.warning("%s was made in %s mode: %s mode starts a fresh checkpoint (the input "
                    "is read again from its first record; the changelog gets the same "
                    "values)", path, was, mode)
        shutil.rmtree(path)
        kept = list(inputs) if positions else []
    path.mkdir(parents=True, exist_ok=True)
    mark.write_text(json.dumps({"trigger": mode, "inputs": kept}) + "\n")
    return kept
