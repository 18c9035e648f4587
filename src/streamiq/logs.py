"""Logs of every process: one JSON object per line for machines, readable lines for people.

``--log-format auto`` (the default) writes text when stderr is a terminal and JSON lines
otherwise (a file, a pipe, a container runtime's log collector). A JSON line holds
``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``msg``, ``exc`` when an exception is
logged, and any ``extra={...}`` fields given to the call.
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["JsonFormatter", "configure_logging"]

TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: attributes every LogRecord has: anything else on a record came from ``extra=``
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc = {"ts": f"{ts}.{int(record.msecs):03d}Z", "level": record.levelname,
               "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        for k, v in vars(record).items():
            if k not in _STANDARD and k not in doc:
                doc[k] = v
        return json.dumps(doc, default=str, ensure_ascii=False)


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """streamiq's loggers at ``level``; every other library's at WARNING (py4j, for
    one, logs its connection handling on the root logger at INFO). ``fmt``: json,
    text or auto (text on a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    handler.setFormatter(JsonFormatter() if use_json else logging.Formatter(TEXT))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("streamiq").setLevel(getattr(logging, level.upper(), logging.INFO))
