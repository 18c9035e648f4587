"""The stop-noise filter in Spark's real JVM and log4j2: Spark's own ``ErrorNotifier``
reporting a shuffle writer's connection closed is dropped only while armed; every other
error, and that one while nothing is being stopped, goes through."""

from __future__ import annotations

from typing import Any

from streamiq.pipeline.stopnoise import stop_noise

CLOSED = "Connection to streaming shuffle writer 12 closed before termination"
NOTIFIER = "org.apache.spark.util.ErrorNotifier"


def _mark(spark: Any, message: str) -> None:
    """What a streaming shuffle reader does when its writer's connection closes: a new
    ErrorNotifier (one per reader task) logs its first error at ERROR."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.util.ErrorNotifier().markError(jvm.org.apache.spark.SparkException(
        message))


def _verdict(spark: Any, logger: str, level: str, message: str | None) -> str:
    jvm = spark.sparkContext._jvm
    exc = None if message is None else jvm.org.apache.spark.SparkException(message)
    handle = stop_noise(spark)._filter
    return str(handle.check(logger, getattr(jvm.org.apache.logging.log4j.Level, level), exc)
               .toString())


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
        for logger, level, message in [
            (NOTIFIER, "ERROR", "Streaming shuffle checksum verification failed"),
            (NOTIFIER, "ERROR", None),
            (NOTIFIER, "WARN", CLOSED),
            ("org.apache.spark.executor.Executor", "ERROR", CLOSED),
            (NOTIFIER, "ERROR", "Connection to streaming shuffle writer closed"),
        ]:
            assert _verdict(spark, logger, level, message) == "NEUTRAL", (logger, message)
        noise.disarm()
        assert _verdict(spark, NOTIFIER, "ERROR", CLOSED) == "NEUTRAL"
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
