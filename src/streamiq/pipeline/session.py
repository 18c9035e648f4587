"""A SparkSession tuned for low-latency micro-batches on a small machine.

Measured on 2 cores: the defaults (200 shuffle partitions, UI, 3 s locality wait,
no-data batches, FIFO scheduling across queries) cost seconds per micro-batch.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.connector import connector_jars
from streamiq.pipeline.stopnoise import drop_expected

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["QUIET_LOGGERS", "SESSION_CONF", "mode_session", "quiet", "silence",
           "spark_session"]

SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # a state store task per input partition, not 200
    "spark.sql.shuffle.partitions": "3",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    # update mode emits on every batch; watermark-only batches are not needed
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # an idle query asks Kafka for its ends every pollingDelay (10 ms by default): an
    # idle pipeline of 3 views then cost 11 s of CPU a minute in Spark and 6 s in the
    # broker; at 100 ms 4.8 s and 2.5 s (measured on 2 cores). A record arriving on an
    # idle pipeline waits up to 100 ms more; under load the next batch starts at once
    "spark.sql.streaming.pollingDelay": "100ms",
    # state store tasks prefer "their" executor; never wait for it
    "spark.locality.wait": "0",
    # several queries (one per view) share the cores: don't let one starve the others
    "spark.scheduler.mode": "FAIR",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.minBatchesToRetain": "20",
    # checkpoint and state files through Hadoop's FileSystem, not its FileContext: on a
    # local disk (the checkpoint dir is a path) FileContext's rename asks a `readlink`
    # process of each file renamed (Hadoop without its native library), 32 processes per
    # micro-batch of one view, 50 ms of each batch's offset-log write; FileSystem's rename
    # is the OS's (rename(2), atomic on a local or NFS path): 7 processes (each file's
    # chmod), offset log 55 -> 24 ms, state store commit 42 -> 3 ms a batch
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "20",
    "spark.sql.streaming.numRecentProgressUpdates": "200",
    "spark.sql.pyspark.jvmStacktrace.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -XX:TieredStopAtLevel=4",
    "spark.executor.extraJavaOptions": "-XX:+UseParallelGC",
}


def _launch_jvm(master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start Spark's JVM in a session of its own (once per process).

    A signal sent to this process's group (``streamiq up``, systemd, a terminal's
    Ctrl-C) then reaches only this process, which stops its queries in order (letting
    the batch in flight finish) and then Spark. A JVM in the group stopped its
    SparkContext under the running queries (stack traces, a failed batch), and so did
    its Python workers. The JVM still exits with this process, SIGKILL included: it
    leaves when its stdin, a pipe from this process, closes.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def spark_session(master: str = "local[2]", app_name: str = "streamiq",
                  shuffle_partitions: int | None = None, **conf: Any) -> SparkSession:
    """Build (or get) the SparkSession; Spark's ``kafka`` format is there when its
    connector is installed (``streamiq install``).

    ``conf`` entries (real Spark keys: ``spark_session(**{"spark.x": v})``) override
    :data:`SESSION_CONF`.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = dict(SESSION_CONF)
    if master.startswith("local"):
        # Local mode talks to itself only: bind the driver to loopback, never to a NIC.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update({"spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1"})
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    jars = connector_jars()  # format("kafka"), when installed (pipeline/connector.py)
    if jars:
        settings["spark.jars"] = ",".join(jars)
    settings.update({k: str(v) for k, v in conf.items()})
    _launch_jvm(master, app_name, settings)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet(spark)
    drop_expected(spark)  # routine lines of documented settings (pipeline/stopnoise.py)
    return spark


#: loggers whose warnings are expected, not news: the FAIR scheduler's pool per query is
#: made on first use ("pool ... has not been configured"), and the dead-letter queries'
#: micro-batches may take longer than their 10 s trigger ("falling behind")
QUIET_LOGGERS = ("org.apache.spark.scheduler.FairSchedulableBuilder",
                 "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor")


def mode_session(master: str, trigger: str, partitions: int, spark_config: dict[str, str],
                 app_name: str, slots: int) -> SparkSession:
    """The pipeline's session for its mode (``local[N]`` sized to real-time mode's
    ``slots``; a cluster with fewer is refused: ``modes.ModeError``)."""
    from streamiq.pipeline import modes

    given = master
    if trigger == modes.REAL_TIME:
        master = modes.local_master(master, slots)
    conf = {**modes.session_conf(trigger), **spark_config}
    spark = spark_session(master, app_name=app_name, shuffle_partitions=modes.shuffle_partitions(
        trigger, partitions), **conf)
    if trigger == modes.REAL_TIME and master == given:
        modes.check_slots(spark, slots, master)
    return spark


def _quiet(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # the context is running
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, error)


def silence(spark: SparkSession) -> None:
    """No more of Spark's log lines (the pipeline is stopping): stopping a real-time
    query interrupts its long-lived tasks, and Spark logs each abort as an error with
    its stack (dozens of lines that are no news at a stop)."""
    _levels(spark, "OFF")


def _levels(spark: SparkSession, level: str) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    to = getattr(jvm.org.apache.logging.log4j.Level, level)
    jvm.org.apache.logging.log4j.core.config.Configurator.setRootLevel(to)
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("org.apache.spark", to)


@contextlib.contextmanager
def quiet(spark: SparkSession) -> Iterator[None]:
    """Spark's log lines off for a while (stopping queries of our own), back at WARN."""
    _levels(spark, "OFF")
    try:
        yield
    finally:
        _levels(spark, "WARN")
        _quiet(spark)
