"""Plain, one-line logs for every process."""

from __future__ import annotations

import logging
import sys

__all__ = ["configure_logging"]


def configure_logging(level: str = "info") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True,
    )
    for noisy in ("httpx", "httpcore", "py4j", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
