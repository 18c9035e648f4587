"""The stop-noise filter in Spark's real JVM and log4j2: Spark's own ``ErrorNotifier``
reporting a shuffle writer's connection closed (and the executor reporting a reader
task that failed on it), a killed writer task's "Aborting task"
(interrupted) and its commit's abort are dropped only while armed; every other error,
and those while nothing is being stopped, go through."""

from __future__ import annotations

from typing import Any

from streamiq.pipeline.stopnoise import stop_noise

CLOSED = ("Connection to streaming shuffle writer 12 closed before termination; the writer "
          "task likely failed.")
NOTIFIER = "org.apache.spark.util.ErrorNotifier"
UTILS = "org.apache.spark.util.Utils"
EXECUTOR = "org.apache.spark.executor.Executor"
WRITER = "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask"
ABORTING = "Aborting commit for partition 2 (task 5, attempt 0, stage 1.0)"


def _mark(spark: Any, message: str) -> None:
    """What a streaming shuffle reader does when its writer's connection closes: a new
    ErrorNotifier (one per reader task) logs its first error at ERROR."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.util.ErrorNotifier().markError(jvm.org.apache.spark.SparkException(
        message))


def _verdict(spark: Any, logger: str, level: str, message: str | None,
             thrown: str | None = "spark") -> str:
    """The filter's verdict on ``logger`` logging ``message`` at ``level``: as a
    SparkException's message (``thrown="spark"``), an InterruptedException's, or the
    event's own text (``thrown=None``)."""
    jvm = spark.sparkContext._jvm
    exc = None
    if thrown == "spark" and message is not None:
        exc = jvm.org.apache.spark.SparkException(message)
    elif thrown == "interrupted":
        exc = jvm.java.lang.InterruptedException()
    text = message if thrown is None else "Aborting task"
    handle = stop_noise(spark)._filter
    return str(handle.check(logger, getattr(jvm.org.apache.logging.log4j.Level, level), text,
                            exc).toString())


def test_installed_once_in_log4j2s_configuration(spark: Any) -> None:
    noise = stop_noise(spark)
    assert stop_noise(spark) is noise
    jvm = spark.sparkContext._jvm
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    assert config.getFilter() is not None and "StopNoiseFilter" in config.getFilter().toString()


def test_only_the_closed_writer_error_and_only_while_armed(spark: Any) -> None:
    noise = stop_noise(spark)
    try:
        noise.arm()
        assert _verdict(spark, NOTIFIER, "ERROR", CLOSED) == "DENY"
        assert _verdict(spark, NOTIFIER, "ERROR", CLOSED.split(";")[0]) == "DENY"
        assert _verdict(spark, UTILS, "ERROR", None, "interrupted") == "DENY"
        assert _verdict(spark, UTILS, "ERROR", CLOSED) == "DENY"  # a reader task's abort
        # the executor's report of a reader task that failed on it before its kill came
        assert _verdict(spark, EXECUTOR, "ERROR", CLOSED) == "DENY"
        assert _verdict(spark, WRITER, "ERROR", ABORTING, None) == "DENY"
        assert _verdict(spark, WRITER, "ERROR", ABORTING.replace("ing", "ed"), None) == "DENY"
        for logger, level, message, thrown in [
            (NOTIFIER, "ERROR", "Streaming shuffle checksum verification failed", "spark"),
            (NOTIFIER, "ERROR", None, "spark"),
            (NOTIFIER, "WARN", CLOSED, "spark"),
            (EXECUTOR, "ERROR", "Task failed: input row is null", "spark"),
            (EXECUTOR, "WARN", CLOSED, "spark"),
            (NOTIFIER, "ERROR", "Connection to streaming shuffle writer closed", "spark"),
            (UTILS, "ERROR", "Aborting task", "spark"),  # a task that failed, not killed
            (UTILS, "WARN", None, "interrupted"),
            (WRITER, "ERROR", "Writer for partition 2 is aborting.", None),
            (WRITER, "ERROR", ABORTING, "spark"),  # an abort with a cause: news
        ]:
            assert _verdict(spark, logger, level, message, thrown) == "NEUTRAL", (logger, message)
        noise.disarm()
        assert _verdict(spark, NOTIFIER, "ERROR", CLOSED) == "NEUTRAL"
        assert _verdict(spark, EXECUTOR, "ERROR", CLOSED) == "NEUTRAL"
        assert _verdict(spark, UTILS, "ERROR", None, "interrupted") == "NEUTRAL"
        assert _verdict(spark, WRITER, "ERROR", ABORTING, None) == "NEUTRAL"
    finally:
        noise.disarm()


def test_spark_s_own_error_notifier_goes_through_it(spark: Any) -> None:
    """Through slf4j and log4j2 as Spark logs it: counted as dropped only when armed."""
    noise = stop_noise(spark)
    before = noise.dropped
    _mark(spark, CLOSED)  # disarmed: printed (a writer that died is news)
    assert noise.dropped == before
    try:
        noise.arm()
        _mark(spark, CLOSED)
        assert noise.dropped == before + 1
        _mark(spark, "Streaming shuffle client handler caught exception.")
        assert noise.dropped == before + 1
    finally:
        noise.disarm()


def test_a_killed_writer_task_s_lines_through_slf4j(spark: Any) -> None:
    """As Spark logs them (slf4j, a message without parameters; a throwable): dropped
    only when armed."""
    jvm = spark.sparkContext._jvm
    noise = stop_noise(spark)
    writer = jvm.org.slf4j.LoggerFactory.getLogger(WRITER)
    utils = jvm.org.slf4j.LoggerFactory.getLogger(UTILS)
    before = noise.dropped
    writer.error(ABORTING)  # disarmed: printed
    assert noise.dropped == before
    try:
        noise.arm()
        writer.error(ABORTING)
        utils.error("Aborting task", jvm.java.lang.InterruptedException())
        assert noise.dropped == before + 2
        writer.error("Writer for partition 2 is aborting.")
        assert noise.dropped == before + 2
    finally:
        noise.disarm()
