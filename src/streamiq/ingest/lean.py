"""The ingest's writes on the HTTP server's lean path: parse, check, produce, answer.

``run_ingest`` gives the server a ``LeanWrites`` (``serving/http/leanserve.py``'s
``LeanPosts``): a POST to ``/account/{id}``, ``/transfer`` or ``/orders`` is taken from
its head, and once its body is read, checked (``ingest/records.py``), produced
(``ingest/producer.py``) and answered from the delivery's callback, with the bytes and
headers the FastAPI route answers (``{"topic", "partition", "offset", "position", "key",
"record"}``). No ASGI scope, routing, dependency or pydantic model per write: those
were most of the 0.75 ms of CPU a write cost (docs/design.md, "The ingest's write path").

Everything else reaches the FastAPI app behind it, as before: what the checks do not
take (every refusal: the 400 naming the field, 401/403 for a token that may not write),
``/health``, ``/metrics``, ``/docs``. The server's edge (``http_limits.py``) has refused
what it must before a write gets here: the token checked from the head before the body
is read, 413/431/408, counted by reason. The token is checked again here (a cache hit)
so that this path never depends on the gate being set.

Counted as the FastAPI routes count (``ingest/metrics.py``): records acknowledged per
topic, broker failures (503), each write's latency by route and status class.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from streamiq._http import ApiError, problem
from streamiq.auth import Authenticator
from streamiq.config import Settings
from streamiq.ingest import records
from streamiq.ingest.metrics import IngestCounters
from streamiq.ingest.producer import Producer
from streamiq.serving.changelog.consistency import token_for
from streamiq.serving.http.asgi import Cycle
from streamiq.serving.http.leanserve import Answer, PostRoute
from streamiq.views import bank, orders

__all__ = ["LeanWrites", "answer_body"]

log = logging.getLogger("streamiq.ingest")

_ACCOUNT = "/account/"
_JSON_TYPE = (b"content-type", b"application/json")
Then = Callable[[Answer | None], None]


def answer_body(topic: str, partition: int, offset: int, key: str,
                record: dict[str, Any]) -> bytes:
    """A write's answer as the FastAPI route renders it (Starlette's ``JSONResponse``)."""
    return json.dumps({"topic": topic, "partition": partition, "offset": offset,
                       "position": token_for(topic, partition, offset), "key": key,
                       "record": record}, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode()


class LeanWrites:
    """The write routes of one ingest app, sharing its producer (made by the app's
    lifespan, in ``producers["producer"]``), its counters and its authenticator."""

    def __init__(self, settings: Settings, topics: tuple[str, ...], auth: Authenticator,
                 counters: IngestCounters, producers: Mapping[str, Producer]) -> None:
        self.auth = auth
        self.counters = counters
        self.producers = producers
        self.bank = settings.topic(bank.TOPIC) if bank.TOPIC in topics else None
        self.orders = settings.topic(orders.TOPIC) if orders.TOPIC in topics else None

    def route(self, cycle: Cycle) -> PostRoute | None:
        """The route of a POST from its path (None: the app answers it)."""
        path = cycle.path
        if self.bank is not None and path.startswith(_ACCOUNT):
            route: PostRoute = self.deposit
        elif self.bank is not None and path == "/transfer":
            route = self.transfer
        elif self.orders is not None and path == "/orders":
            route = self.order
        else:
            return None
        if b"%" in cycle.raw_path or not self._may_write(cycle.headers):
            return None
        return route

    def _may_write(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if not self.auth.enabled:
            return True
        token = next((v for k, v in headers if k == b"authorization"), None)
        try:
            self.auth.writer(token)
        except Exception:  # Unauthenticated, Forbidden: the app answers 401 or 403
            return False
        return True

    def deposit(self, cycle: Cycle, then: Then) -> None:
        assert self.bank is not None
        got = records.deposit(cycle.path[len(_ACCOUNT):], cycle.query)
        self._send(self.bank, "/account/{account}", got, then)

    def transfer(self, cycle: Cycle, then: Then) -> None:
        assert self.bank is not None
        self._send(self.bank, "/transfer", records.transfer(cycle.query), then)

    def order(self, cycle: Cycle, then: Then) -> None:
        assert self.orders is not None
        json_body = any(k == b"content-type" and _is_json(v) for k, v in cycle.headers)
        got = records.order(bytes(cycle.body)) if json_body else None
        self._send(self.orders, "/orders", got, then)

    def _send(self, topic: str, route: str, got: records.Record | None, then: Then) -> None:
        if got is None:
            then(None)  # the app answers (a refusal, or what these checks do not take)
            return
        key, record = got
        t0 = perf_counter()

        def delivered(partition: int, offset: int, exc: Exception | None) -> None:
            if exc is not None:
                self._failed(topic, route, t0, exc, then)
                return
            body = answer_body(topic, partition, offset, key, record)
            self.counters.written[topic] = self.counters.written.get(topic, 0) + 1
            self.counters.latency.observe((route, "2xx"), perf_counter() - t0)
            self.counters.lean += 1
            then((200, body, [(b"content-length", b"%d" % len(body)), _JSON_TYPE]))

        try:
            self.producers["producer"].produce(topic, key, record, delivered)
        except Exception as exc:  # BufferError (queue full), KafkaException
            self._failed(topic, route, t0, exc, then)

    def _failed(self, topic: str, route: str, t0: float, exc: Exception, then: Then) -> None:
        """The FastAPI route's 503 for a write the broker did not take."""
        self.counters.failed += 1
        self.counters.latency.observe((route, "5xx"), perf_counter() - t0)
        then(problem(ApiError(503, "PRODUCE_FAILED", f"write to {topic} failed: {exc}")))


def _is_json(content_type: bytes) -> bool:
    """``application/json``, with parameters or not (what the FastAPI route parses as
    JSON; anything else, absent included, goes to it)."""
    media = content_type.partition(b";")[0].strip().lower()
    return media == b"application/json"
