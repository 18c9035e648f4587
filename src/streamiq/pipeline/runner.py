"""``streamiq pipeline``: one streaming query per view, changelogs out, dead letters aside.

Per view: Spark's ``kafka`` source (earliest) -> ``from_json`` + validation
(invalid records counted by an observed metric, kept out of the view) -> the view's
``transform`` -> ``update`` output -> the ``streamiq`` sink
(:func:`streamiq.pipeline.sinkwriter.sink`, the one changelog writer users' own queries
use too). Checkpoints live in ``<checkpoint_dir>/<view>``: aggregation state and offsets
commit together, the sink writes absolute values, so a replayed batch rewrites the same
rows.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamiq._signals import StopFlag, stop_on_signals
from streamiq.config import Settings
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.jars import JarsError
from streamiq.logs import configure_logging
from streamiq.pipeline.connector import require_connector
from streamiq.pipeline.deadletter import (
    DEAD_LETTER_TOPIC,
    METRIC,
    DeadLetters,
    field_names,
    parse_input,
    valid_column,
)
from streamiq.pipeline.java_kafka import JavaKafkaConfigError, java_kafka_config, source_options
from streamiq.pipeline.metrics import PipelineStats
from streamiq.pipeline.progress import ProgressPublisher
from streamiq.pipeline.sink import batch_offsets, view_rows
from streamiq.pipeline.sinkwriter import sink
from streamiq.pipeline.warmup import warm_up
from streamiq.views.base import CHANGELOG_TOPIC_CONFIG, App, View, load_app
from streamiq.views.catalog import progress_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["READY_LINE", "Pipeline", "build_view_stream", "run_pipeline"]

log = logging.getLogger("streamiq.pipeline")

READY_LINE = "pipeline ready"
_RESTARTS = 5  # restarts of one query within _RESTART_WINDOW_S before the process gives up
_RESTART_WINDOW_S = 300.0


def build_view_stream(spark: SparkSession, view: View, kafka: dict[str, Any],
                      max_offsets_per_trigger: int | None = None,
                      topics: tuple[str, ...] | None = None) -> DataFrame:
    """The view's streaming frame: its key, window and value columns, metric attached.

    ``topics``: the real input topic names (default ``view.source_topics``, unprefixed).
    """
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka").options(**source_options(kafka))
              .option("subscribe", ",".join(topics or view.source_topics))
              .option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    valid = valid_column(view)
    parsed = parse_input(reader.load(), view).observe(
        METRIC, F.count_if(~valid).alias("bad"), F.count(F.lit(1)).alias("records"))
    good = parsed.where(valid).select(*[F.col(f"`{n}`") for n in field_names(view)],
                                      "kafka_timestamp")
    if view.event_time:
        good = good.withColumn("event_time", F.timestamp_millis(F.col(view.event_time)))
    return view_rows(view.transform(good), view)


@dataclass
class _ViewRun:
    view: View
    checkpoint: str
    changelog: str  # the real topic name
    options: dict[str, str]  # the sink's
    dead: DeadLetters | None  # None: another view with the same input reports them
    query: StreamingQuery | None = None
    bad: int = 0
    records: int = 0
    restarts: list[float] = field(default_factory=list)  # when the query was restarted


def _no_records(start: dict[str, Any] | None, end: dict[str, Any]) -> bool:
    """The offset range [start, end) (start None: earliest, i.e. 0) holds no record."""
    return all(int(o) <= int((start or {}).get(t, {}).get(p, 0))
               for t, po in end.items() for p, o in po.items())


class Pipeline:
    """Starts, watches and stops the queries of an :class:`App`."""

    def __init__(self, spark: SparkSession, settings: Settings, app: App,
                 stopping: StopFlag | threading.Event | None = None) -> None:
        self.spark = spark
        self.stopping: StopFlag | threading.Event = stopping or threading.Event()
        self.settings = settings
        self.app = app
        self.kafka = settings.kafka()
        self.runs: dict[str, _ViewRun] = {}
        self.stats = PipelineStats()  # --metrics-port (pipeline/metrics.py)
        self.progress = ProgressPublisher(  # for the nodes' dashboards
            self.kafka, settings.topic(progress_topic(settings.cluster)))
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.error: BaseException | None = None
        self._recover: list[_ViewRun] = []  # crash-window dead-letter scans, first poll
        self._listener: Any = None
        self._closing = False

    @property
    def dead_letters(self) -> int:
        """Invalid input records seen so far (each counted once, not once per view)."""
        return sum(r.bad for r in self.runs.values() if r.dead is not None)

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

    def start(self) -> None:
        parts = self.ensure_topics()
        if self.settings.warmup:
            self.warm_up()
        self._register_listener()
        root = Path(self.settings.checkpoint_dir).resolve()
        seen: set[tuple[Any, ...]] = set()
        for view in self.app.views:
            sig = (view.source_topics, view.value_schema, view.required, view.checks)
            ckpt = str(root / view.name)
            dead = None if sig in seen else DeadLetters(
                self.spark, view, self.kafka, ckpt, self.topics_of(view),
                self.settings.topic(DEAD_LETTER_TOPIC))
            seen.add(sig)
            changelog = self.settings.topic(view.changelog_topic)
            self.runs[view.name] = _ViewRun(view, ckpt, changelog,
                                            self.sink_options(view, parts[changelog]), dead)
        fresh = [r for r in self.runs.values() if not (Path(r.checkpoint) / "commits").is_dir()]
        for run in self.runs.values():
            self._start_query(run)
        self._first_batches(fresh)
        # A query that existed before may have committed batches whose dead letters were
        # not written (a crash between its commit and the record): scanned on the first
        # poll. A new query has no such window: every batch of it reaches the listener,
        # so it is not scanned (that scan, a Spark job, ran alongside the first user
        # write's micro-batch and slowed it by about a second on 2 cores).
        self._recover = [r for r in self.runs.values() if r.dead is not None and r not in fresh]

    def sink_options(self, view: View, partitions: int) -> dict[str, str]:
        """The ``streamiq`` sink's options for one of the app's views."""
        s = self.settings
        opts = {"view": view.name, "key": ",".join(view.key_columns),
                "partitions": str(partitions), "cluster": s.cluster,
                "topicPrefix": s.topic_prefix, "global": str(view.is_global).lower(),
                "description": view.description,
                **{f"kafka.{k}": str(v) for k, v in self.kafka.items()}}
        if view.window:
            opts["window"] = view.window
        return opts

    def warm_up(self) -> None:
        """Run each view's plan once on an example record (see pipeline/warmup.py)."""
        s = self.settings

        def build(view: View, topics: tuple[str, ...]) -> DataFrame:
            return build_view_stream(self.spark, view, self.kafka, None, topics)

        topic = s.topic(f"_streamiq-warmup-{uuid.uuid4().hex[:8]}")
        took = warm_up(self.spark, list(self.app.views), self.kafka, build, topic, s.partitions,
                       cancelled=self.stopping.is_set)
        log.info("warmed up in %.1f s (every view's plan ran once on an example record)", took)

    def _first_batches(self, runs: list[_ViewRun], timeout: float = 180.0) -> None:
        """Wait until each new query has run its first micro-batch (Spark's source runs
        a new query's first batch at once, even empty). A new query's first batch costs
        seconds more than the next ones (state stores, plan, sink), measured 5-7 s with
        three views on 2 cores after the warm-up: paid here, before the pipeline says
        ready, not by the first user's write. Best effort: a query that fails is
        restarted by ``poll``; after ``timeout`` the pipeline starts anyway."""
        deadline = time.monotonic() + timeout
        for run in runs:
            q = run.query
            while (q is not None and q.isActive and q.lastProgress is None
                   and time.monotonic() < deadline and not self.stopping.is_set()):
                time.sleep(0.05)

    def _start_query(self, run: _ViewRun) -> None:
        s = self.settings
        df = build_view_stream(self.spark, run.view, self.kafka, s.max_offsets_per_trigger,
                               self.topics_of(run.view))
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", run.view.name)
        run.query = (sink(df).queryName(run.view.name).outputMode("update")
                     .options(**run.options).option("checkpointLocation", run.checkpoint)
                     .trigger(processingTime=f"{s.trigger_ms} milliseconds").start())
        # None clears the property (pyspark's stub says str)
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        log.info("view %s: query started (checkpoint %s, changelog %s)",
                 run.view.name, run.checkpoint, run.changelog)

    def _register_listener(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        events = self.events

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                metric = p.observedMetrics.get(METRIC)
                if metric is None or (p.numInputRows == 0 and metric["records"] == 0):
                    return
                src = p.sources[0] if p.sources else None
                events.put({"name": p.name, "batch_id": p.batchId, "bad": int(metric["bad"]),
                            "records": int(metric["records"]),
                            "duration_ms": p.batchDuration,
                            "input_rate": p.inputRowsPerSecond,
                            "process_rate": p.processedRowsPerSecond,
                            "start": src.startOffset if src else None,
                            "end": src.endOffset if src else None})

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                events.put({"name": None, "terminated": str(event.id),
                            "exception": event.exception})

        self._listener = _Listener()
        self.spark.streams.addListener(self._listener)

    def _recover_dead_letters(self, run: _ViewRun) -> None:
        """Scan batches committed after the last recorded dead-letter scan (crash window)."""
        assert run.dead is not None
        commits = Path(run.checkpoint) / "commits"
        done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] \
            if commits.is_dir() else []
        if not done:
            return
        last, committed = run.dead.last_batch(), max(done)
        if committed <= last:
            return
        start = batch_offsets(run.checkpoint, last) if last >= 0 else None
        end = batch_offsets(run.checkpoint, committed)
        if end is None:
            return
        if _no_records(start, end):  # e.g. only empty batches since: no Spark job
            run.dead.record(committed)
            return
        n = self._scan(run, start, end)
        log.info("view %s: re-scanned batches %d..%d for dead letters: %d", run.view.name,
                 last + 1, committed, n)
        run.dead.record(committed)

    def _scan(self, run: _ViewRun, start: dict[str, Any] | None, end: dict[str, Any]) -> int:
        """Write the dead letters of [start, end); count them by reason."""
        assert run.dead is not None
        n = run.dead.scan(start, end)
        self.stats.dead_lettered(run.view.name, run.dead.reasons)
        return n

    def poll(self, timeout: float = 0.2) -> None:
        """Handle query progress (dead letters, counters); raise if a query failed."""
        while self._recover:
            self._recover_dead_letters(self._recover.pop(0))
        try:
            ev = self.events.get(timeout=timeout)
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

    def _restart_query(self, run: _ViewRun, exc: Any) -> None:
        """Start a query that stopped again, from its checkpoint (what it committed is
        kept, the batch it was in is redone: the sink writes absolute values). Raises
        once it stopped ``_RESTARTS`` times within ``_RESTART_WINDOW_S``: the process
        then exits 1 and its supervisor (``streamiq up``) restarts it."""
        now = time.monotonic()
        run.restarts = [t for t in run.restarts if now - t < _RESTART_WINDOW_S] + [now]
        first_line = str(exc).strip().splitlines()[0] if exc else "no error given"
        if len(run.restarts) > _RESTARTS:
            raise RuntimeError(f"view {run.view.name!r}: query stopped {len(run.restarts)} "
                               f"times in {_RESTART_WINDOW_S:.0f} s; last: {first_line}")
        self.stats.restarted(run.view.name)
        log.warning("view %s: query stopped (%s); restarting it from its checkpoint "
                    "(restart %d)", run.view.name, first_line, len(run.restarts))
        self._start_query(run)

    def _drain(self, timeout: float = 30.0) -> None:
        """Wait for the micro-batches in flight to finish (each query's; a batch that
        starts after this is interrupted by ``stop`` and redone from the checkpoint)."""
        deadline = time.monotonic() + timeout
        for run in self.runs.values():
            q = run.query
            while q is not None and q.isActive and time.monotonic() < deadline:
                if not q.status["isTriggerActive"]:
                    break
                time.sleep(0.02)

    def _handle(self, ev: dict[str, Any]) -> None:
        import json

        if ev.get("name") is None:
            if ev.get("exception"):
                log.error("query %s terminated: %s", ev.get("terminated"), ev["exception"])
            return
        run = self.runs.get(ev["name"])
        if run is None:
            return
        self.stats.batch(run.view.name, ev)
        self.progress.publish(run.view.name, self.stats.progress(run.view.name),
                              force=bool(ev["bad"]))
        run.records += ev["records"]
        if run.dead is None:
            return
        if ev["bad"]:
            run.bad += ev["bad"]
            start = json.loads(ev["start"]) if ev["start"] not in (None, "", "None") else None
            n = self._scan(run, start, json.loads(ev["end"]))
            log.warning("view %s batch %d: %d invalid record(s) -> %s (%d written; total %d)",
                        run.view.name, ev["batch_id"], ev["bad"], run.dead.topic, n,
                        self.dead_letters)
        # recorded at once, every batch (a small file, beside Spark's several per batch):
        # a crash then leaves at most the batches in flight to re-scan on restart, often
        # none, where a record every 2 s left the last ones: their scan, a Spark job,
        # ran beside the restarted query's first micro-batch (about 30 s of it on 2
        # loaded cores)
        run.dead.record(ev["batch_id"])

    def stop(self) -> None:
        self._closing = True
        self._drain()
        for run in self.runs.values():
            if run.query is not None and run.query.isActive:
                try:
                    run.query.stop()
                except Exception as exc:  # stopping is best effort
                    log.warning("view %s: stop: %s", run.view.name, exc)
        with contextlib.suppress(RuntimeError):
            self.poll(timeout=0)
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None
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
    from streamiq.pipeline.session import spark_session

    spark = spark_session(settings.master, app_name=f"streamiq-{app.name}",
                          shuffle_partitions=settings.partitions, **settings.spark_config)
    pipeline = Pipeline(spark, settings, app, stopping=stop)
    if settings.metrics and settings.metrics_port:
        pipeline.stats.serve(settings.metrics_host, settings.metrics_port)
    failed = False
    try:
        pipeline.start()
        views = ", ".join(v.name for v in app.views)
        print(f"{READY_LINE}: app={app.name} views={views} "
              f"bootstrap={settings.bootstrap_servers} checkpoint={settings.checkpoint_dir}",
              flush=True)
        while not stop.is_set():
            pipeline.poll(0.2)
    except Exception as exc:
        failed = True
        log.error("pipeline failed: %s", exc, exc_info=True)
    finally:
        pipeline.stop()
        log.info("pipeline stopped (%d dead letters seen)", pipeline.dead_letters)
        spark.stop()
    if failed:
        raise SystemExit(1)
