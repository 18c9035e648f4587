"""librdkafka's own log lines, through Python logging, one line per kind per interval.

Left to itself, librdkafka prints each failed connection attempt to stderr, about ten a
second per client while a broker is down: a node (five clients) wrote thousands of
lines while ``up`` restarted its broker. :func:`logged` gives a client's configuration
the ``streamiq.kafka.client`` logger, which keeps the first line of each kind (log
level and librdkafka facility, such as ``FAIL``) per ``INTERVAL_S`` and names how many
it held back in the next one. The lines then take the process's log format (JSON or
text) like every other line.

confluent-kafka hands a client's lines over only when the client is polled. A client
used now and then (the pipeline's marker producer, once a batch; a node's tick producer,
once a waiting read) would hand them over at its next use, maybe minutes late: a refused
connection from a broker restart long over came out during ``up``'s clean stop.
:func:`serve_logs` polls such clients every ``SERVE_S`` from one daemon thread.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["INTERVAL_S", "LOGGER", "SERVE_S", "logged", "serve_logs"]

#: at most one librdkafka line of a kind per this many seconds, per process
INTERVAL_S = 10.0
#: how often :func:`serve_logs` polls the clients given to it
SERVE_S = 1.0


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


_served: list[weakref.WeakMethod[Callable[[], object]]] = []
_served_lock = threading.Lock()
_server: threading.Thread | None = None


def serve_logs(poll: Callable[[], object]) -> None:
    """Call ``poll`` (a bound method polling its object's client with no wait) every
    ``SERVE_S`` from one daemon thread, for as long as its object lives. ``poll`` owns
    its client's thread-safety (e.g. skip while the owner flushes)."""
    global _server
    with _served_lock:
        _served.append(weakref.WeakMethod(poll))
        if _server is None:
            _server = threading.Thread(target=_serve, name="kafka-client-logs", daemon=True)
            _server.start()


def _serve() -> None:
    while True:
        time.sleep(SERVE_S)
        _serve_once()


def _serve_once() -> None:
    """Poll every live client once (no reference to one is kept past this call: a client
    whose owner let it go is freed, not polled again)."""
    with _served_lock:
        _served[:] = [ref for ref in _served if ref() is not None]
        refs = list(_served)
    for ref in refs:
        poll = ref()
        if poll is None:
            continue
        try:
            poll()
        except Exception as exc:  # a closed client: its owner's business, not ours
            logging.getLogger(__name__).debug("serving a client's lines: %r", exc)
