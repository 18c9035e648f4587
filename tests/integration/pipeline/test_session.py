"""The SparkSession streamiq builds: what a newcomer's ``make demo`` prints on start."""

from __future__ import annotations

from typing import Any

from streamiq.pipeline.session import QUIET_LOGGERS


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
