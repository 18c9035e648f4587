"""The Spark side of streamiq: the ``streamiq`` sink and ``streamiq pipeline`` (which
reads with Spark's own ``kafka`` source). Importing this package does not import PySpark."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> SparkSession:
    """Register the ``streamiq`` sink with ``spark`` (``streamiq.sink`` does it itself)."""
    from streamiq.pipeline.session import register_formats

    return register_formats(spark)
