"""streamiq: queryable state for PySpark Structured Streaming, from any node.

Packages by runtime role: ``pipeline/`` runs in Spark (the sink and the changelog it
writes); ``serving/`` is a node (it follows the changelogs into ``state/`` stores and
answers queries over HTTP, SQL and the peer protocol); ``routing/`` says which node owns
which partition; ``ingest/`` takes writes; ``views/`` defines what is served;
``kafka/`` is the broker and its clients' helpers; ``client/`` is the Python client
users embed; ``cli/`` is the ``streamiq`` command that runs them all.

The names below are imported on first use (PEP 562): ``import streamiq`` alone loads
neither the HTTP client (httpx) nor the settings (pydantic) nor PySpark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamiq.client import AsyncClient, Client, QueryError
    from streamiq.config import Settings
    from streamiq.views.base import App, View

__all__ = ["App", "AsyncClient", "Client", "QueryError", "Settings", "View", "sink"]
__version__ = "0.1.0"

#: each public name's module, imported when the name is first read
_LAZY = {"AsyncClient": "streamiq.client", "Client": "streamiq.client",
         "QueryError": "streamiq.client", "Settings": "streamiq.config",
         "App": "streamiq.views.base", "View": "streamiq.views.base"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamiq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


def sink(df: Any) -> Any:
    """Write a streaming DataFrame to a view: ``streamiq.sink(df).option("view", ...)
    .option("key", ...)...start()`` (docs/sink.md). Imports PySpark on first use only."""
    from streamiq.pipeline.sinkwriter import sink as _sink

    return _sink(df)
