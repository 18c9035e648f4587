"""The SparkSession streamiq builds: what a newcomer's ``make demo`` prints on start."""

from __future__ import annotations

from typing import Any

from streamiq.pipeline.session import QUIET_LOGGERS, spark_session


def _level(spark: Any, name: str) -> str:
    jvm = spark.sparkContext._jvm
    return str(jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel().toString())


def test_expected_start_warnings_are_quiet_and_the_rest_are_not(spark: Any) -> None:
    # the pool-per-view and format re-registration warnings came on every start
    assert {name: _level(spark, name) for name in QUIET_LOGGERS} == dict.fromkeys(
        QUIET_LOGGERS, "ERROR")
    # their neighbours still warn
    assert _level(spark, "org.apache.spark.scheduler.DAGScheduler") == "WARN"
    assert _level(spark, "org.apache.spark.sql.execution.streaming") == "WARN"


def _verdict(spark: Any, logger: str, level: str, message: str) -> str:
    """What log4j2's configuration-wide filters make of ``logger`` logging ``message``."""
    jvm = spark.sparkContext._jvm
    event = (jvm.org.apache.logging.log4j.core.impl.Log4jLogEvent.newBuilder()
             .setLoggerName(logger).setLevel(getattr(jvm.org.apache.logging.log4j.Level, level))
             .setMessage(jvm.org.apache.logging.log4j.message.SimpleMessage(message)).build())
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    return str(config.getFilter().filter(event).toString())


def test_the_row_size_warning_of_sending_each_row_is_dropped_once_installed(
        spark: Any) -> None:
    """With ``modes.SEND_EACH_ROW`` each row crosses real-time mode's shuffle on its own
    (a 1-byte buffer), and every writer would warn (up to once a second) that its rows are
    larger than that; the same warning of another block size, and the writer's other
    warnings, print."""
    writer = "org.apache.spark.shuffle.streaming.StreamingShuffleWriter"
    ours = ("59bc5 3 Row size 108 is larger than the block size 1. Consider increasing the "
            "block size.")
    assert _verdict(spark, writer, "WARN", ours) == "DENY"
    for message in (ours.replace("size 1.", "size 64."),
                    "59bc5 3 Row size 9000000 is >25% of the writer memory budget"):
        assert _verdict(spark, writer, "WARN", message) == "NEUTRAL", message
    jvm = spark.sparkContext._jvm
    filters = str(jvm.org.apache.logging.log4j.LogManager.getContext(
        False).getConfiguration().getFilter().toString())
    again = spark_session("local[2]", app_name="streamiq-tests", shuffle_partitions=None)
    assert again is spark  # the same session (getOrCreate), and no second filter
    assert str(jvm.org.apache.logging.log4j.LogManager.getContext(
        False).getConfiguration().getFilter().toString()) == filters
