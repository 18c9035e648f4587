"""The pipeline's --warmup and --spark-config settings reach what they tune (no Spark)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from procs import FAST_ENV

from streamiq.cli.up import _parts
from streamiq.config import Settings
from streamiq.pipeline import runner
from streamiq.pipeline.runner import Pipeline
from streamiq.views.base import App


@pytest.fixture(autouse=True)
def _no_test_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings() here read no STREAMIQ_WARMUP / STREAMIQ_SPARK_CONFIG of the tests' own
    (tests/conftest.py sets them for the pipelines the integration tests start)."""
    for name in FAST_ENV:
        monkeypatch.delenv(name, raising=False)


def _started(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> list[str]:
    """Pipeline.start of an app without views; returns the steps it took."""
    steps: list[str] = []
    monkeypatch.setattr(Pipeline, "warm_up", lambda self: steps.append("warm_up"))
    monkeypatch.setattr(runner, "listen", lambda *a: steps.append("listener"))
    monkeypatch.setattr(runner, "topic_max_bytes", lambda *a: 1_000_000)
    monkeypatch.setattr(runner, "stop_noise", lambda spark: SimpleNamespace(
        disarm=lambda: steps.append("disarm")))
    p = Pipeline(settings, App(name="none", topics=(), views=()))
    p.start(spark=object())  # type: ignore[arg-type]  # no query: no Spark call
    return steps


def test_the_warm_up_runs_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # the warm-up's stop-noise filter is disarmed once the pipeline's queries run
    assert _started(monkeypatch, Settings(warmup=True)) == ["warm_up", "listener", "disarm"]
    assert _started(monkeypatch, Settings(warmup=False)) == ["listener"]


class _Stop(Exception):
    pass


def test_spark_config_reaches_the_session_over_streamiqs_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def spark_session(master: str, **kw: Any) -> None:
        seen.update(kw, master=master)
        raise _Stop

    monkeypatch.setattr("streamiq.pipeline.session.spark_session", spark_session)
    monkeypatch.setattr(runner, "stop_on_signals", lambda: None)
    monkeypatch.setattr(Pipeline, "plan", lambda self: 0)  # no Kafka
    conf = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    with pytest.raises(_Stop):
        runner.run_pipeline(Settings(master="local[1]", app="bank", spark_config=conf))
    assert seen["master"] == "local[1]"
    assert seen["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"


@pytest.mark.parametrize("warmup", [True, False])
def test_ups_pipeline_takes_both(warmup: bool) -> None:
    conf = {"spark.driver.memory": "2g"}
    pipeline, = (p for p in _parts(Settings(warmup=warmup, spark_config=conf), 1, 9101)
                 if p.name == "pipeline")
    argv = pipeline.argv
    assert json.loads(argv[argv.index("--spark-config") + 1]) == conf
    assert ("--warmup" if warmup else "--no-warmup") in argv


class _NoDeadLetters:
    written, reasons = 0, {}  # type: ignore[var-annotated]

    def batch(self, metric: dict[str, Any]) -> int:
        return 0


class _MarkersSeen:
    def __init__(self) -> None:
        self.batches: list[int] = []

    def batch(self, batch_id: int) -> None:
        self.batches.append(batch_id)


@pytest.mark.parametrize("trigger", ["real-time", "micro-batch"])
def test_a_views_input_is_counted_as_it_is_read_in_either_mode(
        monkeypatch: pytest.MonkeyPatch, trigger: str) -> None:
    """A real-time batch reports its input only when it ends (minutes): the view's
    input is counted from its dead-letter query, which reads the same input every 10 s;
    in micro-batch from the view's own batches. Never both."""
    from streamiq.views.bank import APP, BALANCES

    monkeypatch.setattr(runner.Pipeline, "_publish_progress", lambda *a, **k: None)
    p = Pipeline(Settings(trigger=trigger), APP)
    topics = ("bank-input",)
    view_run = runner._Run("balances", BALANCES, "/cp", topics)
    view_run.markers = _MarkersSeen()  # type: ignore[assignment]
    dead_run = runner._Run("balances.dead-letters", BALANCES, "/cp-dl", topics)
    dead_run.dead = _NoDeadLetters()  # type: ignore[assignment]
    p.runs = {r.name: r for r in (view_run, dead_run)}
    p._handle({"name": "balances.dead-letters", "batch_id": 0, "records": 7, "metric": {}})
    p._handle({"name": "balances", "batch_id": 0, "records": 7, "metric": None})
    assert p.stats.records["balances"] == 7
    assert view_run.markers.batches == [0]  # type: ignore[union-attr]


class _Reader:
    """A stand-in for ``spark.readStream``: records the options it is given."""

    def __init__(self) -> None:
        self.options_given: dict[str, str] = {}
        self.readStream = self

    def format(self, name: str) -> _Reader:
        return self

    def option(self, key: str, value: str) -> _Reader:
        self.options_given[key] = value
        return self

    def options(self, **kw: str) -> _Reader:
        self.options_given.update(kw)
        return self

    def load(self) -> str:
        return "rows"


@pytest.mark.parametrize("micro_batch", [True, False])
def test_a_micro_batch_source_waits_10_ms_for_a_fetch_a_real_time_one_the_default(
        micro_batch: bool) -> None:
    """Each micro-batch seeks the Java consumer and polls: at its default fetch wait
    (500 ms) a one-record batch's read waited ~140 ms; a real-time task polls without
    seeking, and a 10 ms wait would only make an idle query fetch 100 times a second."""
    from streamiq.pipeline import queries

    reader = _Reader()
    queries._source(reader, {"bootstrap.servers": "h:1"}, ["t"],  # type: ignore[arg-type]
                    micro_batch=micro_batch)
    assert reader.options_given["subscribe"] == "t"
    assert reader.options_given.get("kafka.fetch.max.wait.ms") == ("10" if micro_batch
                                                                   else None)


def test_a_progress_event_is_read_from_sparks_json_of_it() -> None:
    """The listener reads each progress report as Spark's JSON (one call into the JVM):
    the batch, its input count and the dead-letter query's observed metric come from
    it; a batch that read nothing is no event."""
    from streamiq.pipeline.deadletter import METRIC
    from streamiq.pipeline.listener import progress_event

    progress = {"id": "q", "name": "balances.dead-letters", "batchId": 41,
                "batchDuration": 312, "numInputRows": 7, "processedRowsPerSecond": 22.4,
                "durationMs": {"addBatch": 200},
                "observedMetrics": {METRIC: {"null value": 2, "sample": "null value: null"}}}
    assert progress_event(progress) == {
        "name": "balances.dead-letters", "batch_id": 41, "records": 7,
        "metric": {"null value": 2, "sample": "null value: null"}, "duration_ms": 312,
        "input_rate": None, "process_rate": 22.4}
    assert progress_event({**progress, "numInputRows": 0}) is None
    assert progress_event({**progress, "observedMetrics": {}})["metric"] is None  # type: ignore[index]
