"""streamiq: queryable state for PySpark Structured Streaming, from any node."""

from __future__ import annotations

from streamiq.client import AsyncClient, Client, QueryError
from streamiq.config import Settings
from streamiq.views.base import App, View

__all__ = ["App", "AsyncClient", "Client", "QueryError", "Settings", "View"]
__version__ = "0.1.0"
