"""``streamiq pipeline``: one streaming query per view, changelogs out, dead letters aside.

Each view's query (:mod:`~streamiq.pipeline.queries`) writes its changelog through
Spark's Kafka sink, in real-time mode by default (``--trigger``; what each mode needs:
:mod:`~streamiq.pipeline.modes`); each distinct input's invalid records go to the
dead-letter topic from a sibling micro-batch query. After each batch of a view the
driver writes its markers (:mod:`~streamiq.pipeline.markers`). Checkpoints live in
``<checkpoint_dir>/<view>`` (and ``<view>.dead-letters``): aggregation state and offsets
commit together and the changelog holds absolute values, so a replayed batch rewrites
the same rows. The views are published to the cluster's catalog before their queries
start (``pipeline/publish.py``), as ``streamiq.sink`` does.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamiq._signals import StopFlag, stop_on_signals
from streamiq.config import Settings
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.jars import JarsError
from streamiq.kafka.offsets import earliest_is_zero
from streamiq.logs import configure_logging
from streamiq.pipeline import modes
from streamiq.pipeline.connector import require_connector
from streamiq.pipeline.deadletter import DEAD_LETTER_TOPIC, DeadLetterCounts
from streamiq.pipeline.deadletter_writer import topic_max_bytes
from streamiq.pipeline.java_kafka import JavaKafkaConfigError, java_kafka_config
from streamiq.pipeline.listener import Events, listen
from streamiq.pipeline.markers import Markers
from streamiq.pipeline.metrics import PipelineStats
from streamiq.pipeline.progress import ProgressPublisher
from streamiq.pipeline.publish import prepare
from streamiq.pipeline.queries import (
    build_view_stream,
    start_dead_letters,
    start_view,
)
from streamiq.pipeline.scratch import LOCAL_DIR, scratch_dir
from streamiq.pipeline.session import mode_session
from streamiq.pipeline.sink_options import parse_sink_options
from streamiq.pipeline.stopnoise import stop_noise
from streamiq.pipeline.ticks import Ticks, plan_ticks
from streamiq.pipeline.warmup import plan_builder, warm_up
from streamiq.views.base import CHANGELOG_TOPIC_CONFIG, App, View, load_app
from streamiq.views.catalog import progress_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["READY_LINE", "Pipeline", "build_view_stream", "run_pipeline"]

log = logging.getLogger("streamiq.pipeline")

READY_LINE = "pipeline ready"
_RESTARTS = 5  # restarts of one query within _RESTART_WINDOW_S before the process gives up
_RESTART_WINDOW_S = 300.0
Input = tuple[str, int]


@dataclass
class _Run:
    """One query the pipeline keeps running: a view's, or a dead-letter one."""

    name: str
    view: View
    checkpoint: str
    topics: tuple[str, ...]  # real input topic names
    inputs: list[Input] = field(default_factory=list)  # positions the rows carry
    markers: Markers | None = None  # a view's; None for a dead-letter query
    dead: DeadLetterCounts | None = None  # a dead-letter query's
    ticks: Ticks | None = None  # the keys and task count its ticks fold into (ticks.py)
    query: StreamingQuery | None = None
    records: int = 0
    restarts: list[float] = field(default_factory=list)  # when the query was restarted


class Pipeline:
    """Plans (no Spark), then starts, watches and stops the queries of an :class:`App`."""

    def __init__(self, settings: Settings, app: App,
                 stopping: StopFlag | threading.Event | None = None) -> None:
        self.stopping: StopFlag | threading.Event = stopping or threading.Event()
        self.settings = settings
        self.app = app
        self.mode = settings.trigger
        self.kafka = settings.kafka()
        self.runs: dict[str, _Run] = {}
        self.stats = PipelineStats()  # --metrics-port (pipeline/metrics.py)
        for v in app.views:  # every view's counters from the start
            self.stats.records.setdefault(v.name, 0)
        self.progress = ProgressPublisher(  # for the nodes' dashboards
            self.kafka, settings.topic(progress_topic(settings.cluster)))
        self.events: Events = queue.Queue()
        self.spark: SparkSession | None = None
        self._parts: dict[str, int] = {}
        self._dl_bytes = 1_000_000  # the dead letters' limit (the topic's, read at start)
        self._listener: Any = None
        self._closing = False

    @property
    def dead_letters(self) -> int:
        """Dead letters written so far by this process."""
        return sum(r.dead.written for r in self.runs.values() if r.dead is not None)

    def topics_of(self, view: View) -> tuple[str, ...]:
        """The view's real input topics (``--topic-prefix`` applied)."""
        return tuple(self.settings.topic(t) for t in view.source_topics)

    def ensure_topics(self) -> dict[str, int]:
        """Inputs (``partitions``), changelogs (as many as their input), dead letters."""
        n, topic = self.settings.partitions, self.settings.topic
        parts = ensure_topics(self.kafka, {topic(t): n for t in self.app.topics})
        for v in self.app.views:
            parts.update(ensure_topics(self.kafka, dict.fromkeys(self.topics_of(v), n)))
        want = {topic(v.changelog_topic): max(parts[t] for t in self.topics_of(v))
                for v in self.app.views}
        parts.update(ensure_topics(self.kafka, want, config=CHANGELOG_TOPIC_CONFIG))
        parts.update(ensure_topics(self.kafka, {topic(DEAD_LETTER_TOPIC): n}))
        return parts

    def plan(self) -> int:
        """Topics, checkpoints (of this mode: ``modes.prepare_checkpoint``) and runs; the
        task slots real-time mode holds for them (0 in micro-batch)."""
        self._parts = parts = self.ensure_topics()
        root = Path(self.settings.checkpoint_dir).resolve()
        seen: set[tuple[Any, ...]] = set()
        for view in self.app.views:
            topics = self.topics_of(view)
            inputs = [(t, p) for t in topics for p in range(parts[t])]
            kept = modes.prepare_checkpoint(root / view.name, self.mode, inputs,
                                            functools.partial(self._whole, topics),
                                            positions=view.takes_extra)
            changelog = self.settings.topic(view.changelog_topic)
            self.runs[view.name] = _Run(view.name, view, str(root / view.name), topics, kept,
                                        Markers(self.kafka, changelog, parts[changelog],
                                                str(root / view.name)))
            sig = (view.source_topics, view.value_schema, view.required, view.checks)
            if sig not in seen:  # views with the same input and checks: one dead-letter query
                seen.add(sig)
                name = f"{view.name}.dead-letters"
                self.runs[name] = _Run(name, view, str(root / name), topics, dead=DeadLetterCounts(
                    view, self.settings.topic(DEAD_LETTER_TOPIC)))
        if self.mode != modes.REAL_TIME:
            return 0
        views = [r for r in self.runs.values() if r.markers is not None]
        spare = sum(sum(parts[t] for t in r.topics) for r in self.runs.values()
                    if r.dead is not None)  # their batches may all run at once
        return modes.slots([sum(parts[t] for t in r.topics) for r in views],
                           modes.shuffle_partitions(self.mode, self.settings.partitions),
                           spare)

    def _whole(self, topics: tuple[str, ...]) -> bool:
        return all(earliest_is_zero(self.kafka, t, self._parts[t]) for t in topics)

    def start(self, spark: SparkSession) -> None:
        """Publish the views, start every query, wait until each runs."""
        self.spark = spark
        if self.settings.warmup:
            self.warm_up()
        self._listener = listen(self.spark, self.events)
        self._dl_bytes = min(self._dl_bytes, topic_max_bytes(
            self.kafka, self.settings.topic(DEAD_LETTER_TOPIC)))
        for run in self.runs.values():
            if run.markers is not None:
                if self.mode == modes.REAL_TIME and run.inputs:  # one task per input partition
                    run.ticks = plan_ticks(run, self.settings.partitions)
                self._publish(run)
                if run.markers.committed() is not None:
                    log.info("view %s: markers of its last committed batch written again "
                             "(batch %s)", run.name, run.markers.last)
            self._start_query(run)
        self._wait_running([r for r in self.runs.values() if r.markers is not None])
        if self.settings.warmup:  # its queries' tasks ended: slots freed for these
            stop_noise(spark).disarm()  # (pipeline/stopnoise.py)

    def _publish(self, run: _Run) -> None:
        """The view's description on the catalog (before its first rows), as the sink does."""
        assert self.spark is not None and run.markers is not None
        s, view = self.settings, run.view
        opts = {"view": view.name, "key": ",".join(view.key_columns),
                "partitions": str(run.markers.partitions), "cluster": s.cluster,
                "topicPrefix": s.topic_prefix, "global": str(view.is_global).lower(),
                "description": view.description, "checkpointLocation": run.checkpoint,
                "ticks": ",".join(run.topics) if run.ticks else "",
                **{f"kafka.{k}": str(v) for k, v in self.kafka.items()}}
        if view.window:
            opts["window"] = view.window
        rows = build_view_stream(self.spark, view, self.kafka, None, run.topics)
        prepare(parse_sink_options(opts, rows.schema), rows.schema)

    def warm_up(self) -> None:
        """Run each view's plan once on an example record (see pipeline/warmup.py)."""
        import uuid

        assert self.spark is not None
        s = self.settings
        build = plan_builder(self.spark, self.kafka, self.mode == modes.MICRO_BATCH)
        topic = s.topic(f"_streamiq-warmup-{uuid.uuid4().hex[:8]}")
        took = warm_up(self.spark, list(self.app.views), self.kafka, build, topic,
                       s.partitions, cancelled=self.stopping.is_set,
                       trigger=modes.trigger(self.mode, s.realtime_batch_s, s.trigger_ms))
        log.info("warmed up in %.1f s (every view's plan ran once on an example record)", took)

    def _wait_running(self, runs: list[_Run], timeout: float = 180.0) -> None:
        """Until each query runs: a real-time query's tasks are launched; a new
        micro-batch query ran its first batch (Spark runs a new query's first batch at
        once, even empty: seconds more than the next ones, paid here, not by the first
        write). Best effort: a query that fails is restarted by ``poll``."""
        assert self.spark is not None
        deadline = time.monotonic() + timeout
        for run in runs:
            q = run.query
            while (q is not None and q.isActive and not self._is_running(run)
                   and time.monotonic() < deadline and not self.stopping.is_set()):
                time.sleep(0.05)

    def _is_running(self, run: _Run) -> bool:
        assert self.spark is not None and run.query is not None
        if self.mode == modes.REAL_TIME and run.markers is not None:
            return modes.running(self.spark, run.query)
        commits = Path(run.checkpoint) / "commits"
        return run.query.lastProgress is not None or (
            commits.is_dir() and any(commits.iterdir()))

    def _start_query(self, run: _Run) -> None:
        assert self.spark is not None
        s, spark = self.settings, self.spark
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", run.name)
        try:
            if run.dead is not None:
                run.query = start_dead_letters(spark, run.view, self.kafka, run.topics,
                                               run.dead.topic, self._dl_bytes, run.checkpoint,
                                               run.name)
            else:
                assert run.markers is not None
                micro = self.mode == modes.MICRO_BATCH
                rows = build_view_stream(spark, run.view, self.kafka, s.max_offsets_per_trigger
                                         if micro else None, run.topics, run.inputs, micro,
                                         run.ticks)
                run.query = start_view(rows, run.view, run.inputs, self.kafka,
                                       run.markers.topic, run.checkpoint, modes.trigger(
                                           self.mode, s.realtime_batch_s, s.trigger_ms), run.ticks)
        finally:  # None clears the property (pyspark's stub says str)
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        log.info("%s: query started in %s mode (checkpoint %s)", run.name,
                 modes.MICRO_BATCH if run.dead is not None else self.mode, run.checkpoint)

    def poll(self, timeout: float = 0.2) -> None:
        """Handle query progress (markers, dead letters, counters); restart a query that
        stopped (raise if one keeps stopping)."""
        try:
            ev: dict[str, Any] | None = self.events.get(timeout=timeout)
        except queue.Empty:
            ev = None
        while ev is not None:
            self._handle(ev)
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                ev = None
        for run in self.runs.values():
            if run.query is not None and not run.query.isActive and not self._closing:
                self._restart_query(run, run.query.exception())

    def _restart_query(self, run: _Run, exc: Any) -> None:
        """Start a query that stopped again, from its checkpoint (what it committed is
        kept, the batch it was in is redone: the changelog holds absolute values). Raises
        once it stopped ``_RESTARTS`` times within ``_RESTART_WINDOW_S``: the process
        then exits 1 and its supervisor (``streamiq up``) restarts it."""
        now = time.monotonic()
        run.restarts = [t for t in run.restarts if now - t < _RESTART_WINDOW_S] + [now]
        first_line = str(exc).strip().splitlines()[0] if exc else "no error given"
        if len(run.restarts) > _RESTARTS:
            raise RuntimeError(f"{run.name}: query stopped {len(run.restarts)} times in "
                               f"{_RESTART_WINDOW_S:.0f} s; last: {first_line}")
        self.stats.restarted(run.view.name)
        log.warning("%s: query stopped (%s); restarting it from its checkpoint (restart %d)",
                    run.name, first_line, len(run.restarts))
        self._start_query(run)

    def _handle(self, ev: dict[str, Any]) -> None:
        if ev.get("name") is None:
            if ev.get("exception"):
                log.error("query %s terminated: %s", ev.get("terminated"), ev["exception"])
            return
        run = self.runs.get(ev["name"])
        if run is None:
            return
        if run.dead is not None:
            # a real-time batch reports its input only when it ends (minutes): its
            # views' input is counted as this query, on the same input, reads it
            views = self._reading(run.topics) if self.mode == modes.REAL_TIME else []
            for view in views:
                self.stats.read(view, int(ev["records"]))
            n = run.dead.batch(ev["metric"] or {})
            self.stats.dead_lettered(run.view.name, run.dead.reasons)
            self.stats.invalid(run.view.name, n)
            if n or views:
                for view in {run.view.name, *views}:
                    self._publish_progress(view, force=bool(n) and view == run.view.name)
            return
        assert run.markers is not None
        run.markers.batch(ev["batch_id"])
        run.records += ev["records"]
        self.stats.batch(run.view.name, ev, count_input=self.mode != modes.REAL_TIME)
        self._publish_progress(run.view.name)

    def _reading(self, topics: tuple[str, ...]) -> list[str]:  # views reading ``topics``
        return [r.view.name for r in self.runs.values() if r.markers and r.topics == topics]

    def _publish_progress(self, view: str, force: bool = False) -> None:
        self.progress.publish(view, self.stats.progress(view), force=force)

    def stop(self) -> None:
        """Stop every query: a micro-batch one between batches (waiting a while for the
        one in flight), a real-time one at once (its batch is redone from the
        checkpoint at the next start, with the same values)."""
        self._closing = True
        deadline = time.monotonic() + 30.0
        if self.spark is not None:
            from streamiq.pipeline.session import silence

            silence(self.spark)
        for run in self.runs.values():
            q = run.query
            realtime = self.mode == modes.REAL_TIME and run.markers is not None
            while (q is not None and q.isActive and not realtime
                   and q.status["isTriggerActive"] and time.monotonic() < deadline):
                time.sleep(0.02)
            if q is not None and q.isActive:
                try:
                    q.stop()
                except Exception as exc:  # stopping is best effort
                    log.warning("%s: stop: %s", run.name, exc)
        with contextlib.suppress(RuntimeError):
            self.poll(timeout=0)
        if self._listener is not None and self.spark is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None
        for run in self.runs.values():
            if run.markers is not None:
                run.markers.close()
        self.progress.close()


def run_pipeline(settings: Settings) -> None:
    """Run the app's views until SIGTERM/SIGINT (blocking); exit 1 if a query fails."""
    configure_logging(settings.log_level, settings.log_format)
    app = load_app(settings.app, settings.views_module)
    stop = stop_on_signals()
    try:
        java_kafka_config(settings.kafka())
        require_connector()
    # names the kafka_config key, or the missing jar and the install command
    except (JarsError, JavaKafkaConfigError) as exc:
        raise SystemExit(f"streamiq pipeline: {exc}") from None
    pipeline = Pipeline(settings, app, stopping=stop)
    try:
        slots = pipeline.plan()
        conf = dict(settings.spark_config)
        scratch = None if LOCAL_DIR in conf else scratch_dir()  # a killed run's is swept
        if scratch is not None:
            conf[LOCAL_DIR] = str(scratch)
        spark = mode_session(settings.master, settings.trigger, settings.partitions,
                             conf, f"streamiq-{app.name}", slots)
    except modes.ModeError as exc:
        raise SystemExit(f"streamiq pipeline: {exc}") from None
    if settings.metrics and settings.metrics_port:
        pipeline.stats.serve(settings.metrics_host, settings.metrics_port)
    failed = False
    try:
        pipeline.start(spark)
        views = ", ".join(v.name for v in app.views)
        print(f"{READY_LINE}: app={app.name} views={views} mode={settings.trigger} "
              f"bootstrap={settings.bootstrap_servers} checkpoint={settings.checkpoint_dir}",
              flush=True)
        while not stop.is_set():
            pipeline.poll(0.2)
    except Exception as exc:
        failed = True
        log.error("pipeline failed: %s", exc, exc_info=True)
    finally:
        pipeline.stop()
        log.info("pipeline stopped (%d dead letters written)", pipeline.dead_letters)
        spark.stop()
        if scratch is not None:  # nothing of a stopped context is read again
            shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        raise SystemExit(1)
