"""What each trigger mode needs (pipeline/modes.py): slots, settings, refusals in one line,
and a checkpoint that keeps the mode it was made in (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from streamiq.pipeline import modes
from streamiq.pipeline.modes import (
    MICRO_BATCH,
    REAL_TIME,
    ModeError,
    local_master,
    prepare_checkpoint,
    refusal,
    slots,
)

INPUTS = [("bank-transactions", 0), ("bank-transactions", 1)]


def test_real_time_holds_a_slot_per_input_and_shuffle_partition() -> None:
    # bank (3 inputs) and orders' two views (3 each), 3 shuffle partitions, 3 spare
    assert slots([3, 3, 3], 3, spare=3) == 21
    assert local_master("local[*]", 21) == "local[21]"
    assert local_master("local", 21) == "local[21]"
    assert local_master("local[*,4]", 21) == "local[21,4]"  # task retries kept
    assert local_master("local[32]", 21) == "local[32]"
    assert local_master("spark://m:7077", 21) == "spark://m:7077"  # checked once it runs
    with pytest.raises(ModeError) as err:
        local_master("local[2]", 21)
    assert str(err.value).startswith("--master local[2] has 2 task slots; real-time mode "
                                     "holds 21 for these views")
    assert "--trigger micro-batch" in str(err.value) and "\n" not in str(err.value)


def test_each_mode_has_its_settings_and_trigger() -> None:
    rt, mb = modes.session_conf(REAL_TIME), modes.session_conf(MICRO_BATCH)
    assert rt["spark.shuffle.streaming.networkBufferMaxWaitTimeMs"] == "1"
    assert rt["spark.sql.streaming.stateStore.checkpointFormatVersion"] == "2"
    assert rt["spark.sql.streaming.stateStore.providerClass"].endswith(
        "RocksDBStateStoreProvider")
    assert mb["spark.sql.streaming.stateStore.providerClass"].endswith(
        "HDFSBackedStateStoreProvider")
    assert mb["spark.sql.streaming.pollingDelay"] == "10ms"
    # the HDFS store refuses format v2: a session made for real-time mode runs micro-batch
    assert mb["spark.sql.streaming.stateStore.checkpointFormatVersion"] == "1"
    assert modes.trigger(REAL_TIME, 300, 0) == {"realTime": "300 seconds"}
    assert (modes.shuffle_partitions(REAL_TIME, 3), modes.shuffle_partitions(MICRO_BATCH, 3)
            ) == (3, 1)
    assert modes.trigger(MICRO_BATCH, 300, 0) == {"processingTime": "0 milliseconds"}


@pytest.mark.parametrize("error, line", [
    ("[STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST] Streaming real-time mode "
     "has the following limitation: The operator(s): org.apache.spark.sql.execution.python."
     "ArrowEvalPythonExec is not in the operator allowlist for Real-Time Mode. To bypass...",
     "real-time mode does not run ArrowEvalPythonExec (not on its operator allowlist)"),
    ("[STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST] ... The operator(s): "
     "org.apache.spark.sql.execution.SortExec, org.apache.spark.sql.execution.joins."
     "SortMergeJoinExec are not in the operator allowlist for Real-Time Mode.",
     "real-time mode does not run SortExec, SortMergeJoinExec (not on its operator "
     "allowlist)"),
    ("[CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT] Cannot run the pipelined stage group: it needs "
     "6 concurrent task slots to run all its stages together, but only 2 are currently free.",
     "real-time mode needs 6 task slots at once, 2 free (a slot per input and shuffle "
     "partition)"),
    ("[STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED] Streaming real-time mode has the "
     "following limitation: The output mode Append is not supported. To work around...",
     "real-time mode refuses it: The output mode Append is not supported"),
    ("[STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED] Streaming real-time mode has the "
     "following limitation: The input stream org.apache.spark.sql.execution.streaming."
     "sources.RateStreamMicroBatchStream is not supported in Real-time Mode.",
     "real-time mode does not read RateStreamMicroBatchStream (Kafka only)"),
    ("[DIVIDE_BY_ZERO] Division by zero.", None),
])
def test_refusals_are_one_line_naming_why(error: str, line: str | None) -> None:
    assert refusal(error) == line


def test_a_new_checkpoint_records_its_mode_and_positions(tmp_path: Path) -> None:
    ck = tmp_path / "balances"
    assert prepare_checkpoint(ck, REAL_TIME, INPUTS, lambda: True) == INPUTS
    assert json.loads((ck / "streamiq.json").read_text()) == {
        "trigger": REAL_TIME, "inputs": [list(i) for i in INPUTS]}
    # a restart keeps what it recorded, even if the input grew a partition since
    more = [*INPUTS, ("bank-transactions", 2)]
    assert prepare_checkpoint(ck, REAL_TIME, more, lambda: True) == INPUTS
    assert prepare_checkpoint(tmp_path / "user", REAL_TIME, INPUTS, lambda: True,
                              positions=False) == []


def test_a_checkpoint_of_the_other_mode_starts_fresh_when_the_input_is_whole(
        tmp_path: Path) -> None:
    ck = tmp_path / "balances"
    prepare_checkpoint(ck, MICRO_BATCH, INPUTS, lambda: True)
    (ck / "offsets").mkdir()
    (ck / "offsets" / "0").write_text("v1\n")
    assert prepare_checkpoint(ck, REAL_TIME, INPUTS, lambda: True) == INPUTS
    assert not (ck / "offsets").exists()  # Spark's files of the other mode are gone
    assert json.loads((ck / "streamiq.json").read_text())["trigger"] == REAL_TIME


def test_a_checkpoint_of_the_other_mode_is_refused_when_records_were_deleted(
        tmp_path: Path) -> None:
    ck = tmp_path / "balances"
    (ck / "commits").mkdir(parents=True)  # made by an earlier streamiq: micro-batch
    with pytest.raises(ModeError) as err:
        prepare_checkpoint(ck, REAL_TIME, INPUTS, lambda: False)
    msg = str(err.value)
    assert "was made in micro-batch mode" in msg and "--trigger micro-batch" in msg
    assert (ck / "commits").is_dir()  # nothing removed
    # the same mode again: kept, and no positions (its state has no room for them)
    assert prepare_checkpoint(ck, MICRO_BATCH, INPUTS, lambda: False) == []


class _Tracker:
    """Spark's status tracker as ``modes.running`` reads it: jobs of a group, their
    stages' task counts."""

    def __init__(self, jobs: dict[int, tuple[str, dict[int, tuple[int, int]]]]) -> None:
        self.jobs = jobs  # job id -> (status, {stage id: (tasks, active)})

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return list(self.jobs)

    def getJobInfo(self, job: int) -> SimpleNamespace:
        status, stages = self.jobs[job]
        return SimpleNamespace(status=status, stageIds=list(stages))

    def getStageInfo(self, stage: int) -> SimpleNamespace:
        tasks, active = next(s[stage] for _, s in self.jobs.values() if stage in s)
        return SimpleNamespace(numTasks=tasks, numActiveTasks=active)


def _running(jobs: dict[int, tuple[str, dict[int, tuple[int, int]]]]) -> bool:
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: _Tracker(jobs)))
    return modes.running(spark, SimpleNamespace(runId="r"))  # type: ignore[arg-type]


def test_a_real_time_query_runs_once_every_task_of_its_running_batch_does() -> None:
    assert not _running({})  # no job yet
    assert not _running({0: ("RUNNING", {0: (3, 3), 1: (3, 1)})})  # tasks still starting
    assert _running({0: ("RUNNING", {0: (3, 3), 1: (3, 3)})})
    # a batch that ended (its stages idle) beside the next one running: the running one
    # counts (tests run 10 s batches: an earlier batch had ended before ready was asked)
    assert _running({0: ("SUCCEEDED", {0: (3, 0), 1: (3, 0)}),
                     1: ("RUNNING", {2: (3, 3), 3: (3, 3)})})
    assert not _running({0: ("SUCCEEDED", {0: (3, 0)})})  # between two batches
