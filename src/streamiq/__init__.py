"""streamiq: queryable state for PySpark Structured Streaming, from any node."""

from __future__ import annotations

from streamiq.config import Settings
from streamiq.views.base import App, View

__all__ = ["App", "Settings", "View"]
__version__ = "0.1.0"
