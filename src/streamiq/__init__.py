"""streamiq: queryable state for PySpark Structured Streaming, from any node."""

from __future__ import annotations

from typing import Any

from streamiq.client import AsyncClient, Client, QueryError
from streamiq.config import Settings
from streamiq.views.base import App, View

__all__ = ["App", "AsyncClient", "Client", "QueryError", "Settings", "View", "sink"]
__version__ = "0.1.0"


def sink(df: Any) -> Any:
    """Write a streaming DataFrame to a view: ``streamiq.sink(df).option("view", ...)
    .option("key", ...)...start()`` (docs/sink.md). Imports PySpark on first use only."""
    from streamiq.pipeline.sinkwriter import sink as _sink

    return _sink(df)
