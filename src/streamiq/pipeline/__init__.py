"""The Spark side of streamiq: ``streamiq.sink`` and ``streamiq pipeline``, both reading and
writing Kafka with Spark's own connector. Importing this package does not import PySpark."""

from __future__ import annotations

__all__: list[str] = []
