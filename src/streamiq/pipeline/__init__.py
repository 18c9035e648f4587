"""The Spark side of streamiq: the ``streamiq-kafka`` source, the ``streamiq`` sink and
``streamiq pipeline``. Importing this package does not import PySpark."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> SparkSession:
    """Register the ``streamiq-kafka`` source and the ``streamiq`` sink with ``spark``."""
    from streamiq.pipeline.session import register_formats

    return register_formats(spark)
