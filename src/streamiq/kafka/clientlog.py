"""librdkafka's own log lines, through Python logging, one line per kind per interval.

Left to itself, librdkafka prints each failed connection attempt to stderr, about ten a
second per client while a broker is down: a node (five clients) wrote thousands of
lines while ``up`` restarted its broker. :func:`logged` gives a client's configuration
the ``streamiq.kafka.client`` logger, which keeps the first line of each kind (log
level and librdkafka facility, such as ``FAIL``) per ``INTERVAL_S`` and names how many
it held back in the next one. The lines then take the process's log format (JSON or
text) like every other line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["INTERVAL_S", "LOGGER", "logged"]

#: at most one librdkafka line of a kind per this many seconds, per process
INTERVAL_S = 10.0


class _OncePerInterval(logging.Filter):
    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[tuple[int, str], float] = {}
        self._held: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        key = (record.levelno, str(args[0]) if args else str(record.msg))
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, float("-inf")) < self.interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} (and {held} more such lines since the last)"
        return True


#: the logger every client :func:`logged` configures writes to (confluent-kafka calls it
#: with librdkafka's facility, client name and message as the record's args)
LOGGER = logging.getLogger("streamiq.kafka.client")
LOGGER.addFilter(_OncePerInterval(INTERVAL_S))


def logged(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with librdkafka's lines sent to :data:`LOGGER` (served by the client's
    poll, as its callbacks are)."""
    return {**conf, "logger": LOGGER}
