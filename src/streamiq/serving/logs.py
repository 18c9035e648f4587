"""Plain, one-line logs for every process."""

from __future__ import annotations

import logging
import sys

__all__ = ["configure_logging"]


def configure_logging(level: str = "info") -> None:
    """streamiq's loggers at ``level``; every other library's at WARNING (py4j, for
    one, logs its connection handling on the root logger at INFO)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True)
    logging.getLogger("streamiq").setLevel(getattr(logging, level.upper(), logging.INFO))
