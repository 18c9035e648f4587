"""Defaults shared by the settings (:mod:`streamiq.config`) and the ``streamiq`` sink,
in a module of their own: Spark's Python workers read them without importing pydantic."""

from __future__ import annotations

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_PARTITIONS"]

DEFAULT_CLUSTER = "streamiq"
DEFAULT_PARTITIONS = 3
