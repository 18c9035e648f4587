"""The ingest service: validated writes to the input topics, answered with a position.

``POST /account/{id}?amount=N`` and ``POST /transfer?from=A&to=B&amount=N`` (bank)
and ``POST /orders`` (orders) produce a JSON record keyed like the view (account, the
account a transfer leaves; store) with an idempotent producer and Kafka's default
(murmur2) partitioner, and answer with the record's partition, offset and a position
token usable for read-your-writes queries on any node. A transfer is one record,
``{"account": A, "to": B, "amount": N, "ts": ...}`` (a deposit without ``to``); its
``to`` must differ from its ``from`` (``400 to: must differ from from``).

The routes here are the reference and the OpenAPI description; ``run_ingest``'s server
answers the writes they would accept on its lean path (``ingest/lean.py``: the same
answer, without ASGI or pydantic per write) and sends these routes everything else.

Input is refused with a 400 naming the field (``amount: Input should be ...``) when the
pipeline would dead-letter it: amounts outside the bounds of ``streamiq.views.limits``
(the one definition both use), non-finite numbers (``NaN``, ``1e309``), and anything
that is not a JSON number. The order's ``amount`` is *strict*: in lax mode a JSON
``false``/``true`` (or ``"12"``) would be coerced to ``0.0``/``1.0`` (``12.0``) and
stored as an order no client sent.

Its HTTP edge is the nodes' (``serving/http/http_limits.py``, run by ``run_ingest``): a
write's token is checked from its headers before any of its body is read (401/403, the
body never read), a body past 4 MiB is 413 (from ``Content-Length``, or counted while
chunked), a head past 64 KiB or 100 fields 431, and a request not sent whole within
``--request-read-timeout-s`` 408; each counted by reason
(``streamiq_ingest_refused_unread_total``). Keys (account, store, order id) are at most
64 characters (``ID_PATTERN``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel, Field

from streamiq._fastapi import install_error_handlers, known_params
from streamiq._http import ApiError
from streamiq.auth import Authenticator
from streamiq.config import Settings
from streamiq.errors import BadRequest
from streamiq.ingest.lean import LeanWrites
from streamiq.ingest.metrics import IngestCounters, Timed
from streamiq.ingest.producer import Producer
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.clientlog import logged
from streamiq.metrics import CONTENT_TYPE
from streamiq.serving.changelog.consistency import token_for
from streamiq.serving.http.http_limits import Gate, HttpEdge
from streamiq.views import bank, orders
from streamiq.views.base import ID_PATTERN, App, load_app
from streamiq.views.limits import AMOUNT, ORDER_AMOUNT

__all__ = ["Order", "create_ingest_app", "run_ingest"]

log = logging.getLogger("streamiq.ingest")


class Order(BaseModel):
    """An order (seeds 001/002)."""

    model_config = {"extra": "forbid"}
    order_id: str = Field(pattern=ID_PATTERN)
    store: str = Field(pattern=ID_PATTERN)
    type: Literal["GENERAL", "RESTAURANT"]
    amount: float = Field(strict=True, ge=ORDER_AMOUNT.lo, le=ORDER_AMOUNT.hi,
                          allow_inf_nan=False)


def create_ingest_app(settings: Settings, app_def: App | None = None) -> FastAPI:
    app_def = app_def or load_app(settings.app, settings.views_module)
    state: dict[str, Producer] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(ensure_topics, settings.kafka(),
                                {settings.topic(t): settings.partitions for t in app_def.topics})
        state["producer"] = Producer(logged(settings.kafka()))
        try:
            yield
        finally:
            await asyncio.to_thread(state["producer"].close)

    app = FastAPI(title="streamiq ingest", version="0.1.0", lifespan=lifespan,
                  description=__doc__)
    install_error_handlers(app)
    auth = Authenticator.from_settings(settings)
    counters = app.state.counters = IngestCounters()
    # what run_ingest's protocol checks before a body is read (serving/http/http_limits.py)
    app.state.http_edge = HttpEdge(settings.request_read_timeout_s, gate=_token_gate(auth),
                                   refusals=counters.unread)
    # the write routes without ASGI, on run_ingest's server (ingest/lean.py)
    app.state.lean_writes = LeanWrites(settings, app_def.topics, auth, counters, state)

    async def writer(request: Request) -> None:
        """Writes need a token with the ``ingest`` scope (streamiq/auth.py); then every
        query parameter must be one the route takes."""
        auth.writer(request.headers.get("authorization"))
        known_params(request)

    guard = [Depends(writer)]

    async def send(topic: str, key: str, value: dict[str, Any]) -> dict[str, Any]:
        topic = settings.topic(topic)
        try:
            partition, offset = await state["producer"].send(topic, key, value)
        except Exception as exc:
            counters.failed += 1
            raise ApiError(503, "PRODUCE_FAILED", f"write to {topic} failed: {exc}") from None
        counters.written[topic] = counters.written.get(topic, 0) + 1
        log.debug("%s key=%s -> partition %d offset %d", topic, key, partition, offset)
        return {"topic": topic, "partition": partition, "offset": offset,
                "position": token_for(topic, partition, offset), "key": key, "record": value}

    if bank.TOPIC in app_def.topics:
        @app.post("/account/{account}", tags=["bank"], summary="Record a bank transaction",
                  dependencies=guard)
        async def transaction(
            account: Annotated[str, Path(pattern=ID_PATTERN, description="Account id")],
            amount: Annotated[int, Query(ge=AMOUNT.lo, le=AMOUNT.hi,
                                         description="Amount (integer; negative = debit)")],
        ) -> dict[str, Any]:
            record = {"account": account, "amount": amount, "ts": int(time.time() * 1000)}
            return await send(bank.TOPIC, account, record)

        @app.post("/transfer", tags=["bank"], dependencies=guard,
                  summary="Move an amount from one account to another (one record, keyed "
                          "by the account it leaves)")
        async def transfer(
            source: Annotated[str, Query(alias="from", pattern=ID_PATTERN,
                                         description="The account debited")],
            to: Annotated[str, Query(pattern=ID_PATTERN, description="The account credited")],
            amount: Annotated[int, Query(ge=AMOUNT.lo, le=AMOUNT.hi,
                                         description="Amount (integer)")],
        ) -> dict[str, Any]:
            if source == to:
                raise BadRequest("to: must differ from from", problems=[
                    "to: must differ from from"])
            record = {"account": source, "to": to, "amount": amount,
                      "ts": int(time.time() * 1000)}
            return await send(bank.TOPIC, source, record)

    if orders.TOPIC in app_def.topics:
        @app.post("/orders", tags=["orders"], summary="Record an order", dependencies=guard)
        async def order(body: Order) -> dict[str, Any]:
            record = {**body.model_dump(), "ts": int(time.time() * 1000)}
            return await send(orders.TOPIC, body.store, record)

    @app.get("/health", tags=["ops"])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "topics": list(app_def.topics)}

    if settings.metrics:
        app.add_middleware(Timed, counters=counters)
        render = counters.render()

        @app.get("/metrics", tags=["ops"], response_class=Response,
                 summary="Prometheus metrics of the ingest service")
        async def metrics() -> Response:
            return Response(render(), media_type=CONTENT_TYPE)

    return app


def _token_gate(auth: Authenticator) -> Gate:
    """Anything but GET/HEAD is a write: its token is checked from the headers, so a
    request without one is answered 401 before its body is read."""

    def gate(method: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        if method not in (b"GET", b"HEAD"):
            auth.writer(next((v for k, v in headers if k == b"authorization"), None))

    return gate


def run_ingest(settings: Settings, *, lean: bool = True) -> None:
    """Serve the ingest until SIGINT/SIGTERM (``serving/http/server.py``, the nodes' HTTP
    server, its writes on the lean path: ``ingest/lean.py``; ``lean=False``: the FastAPI
    routes answer them, as before, for bench/bench_write_load.py): exits 3 when its port
    is taken or it cannot start."""
    import socket
    import sys

    from streamiq.logs import configure_logging
    from streamiq.serving.http.server import HttpServer, run
    from streamiq.tls import scheme, server_context

    configure_logging(settings.log_level, settings.log_format)
    host, port = settings.ingest_host, settings.ingest_port
    app = create_ingest_app(settings)
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host
                                    else socket.AF_INET, reuse_port=False)
    except OSError as e:
        print(f"streamiq ingest: cannot listen on {host}:{port} (--ingest-host/--ingest-port)"
              f": {e.strerror or e}", file=sys.stderr, flush=True)
        sys.exit(3)
    print(f"streamiq ingest listening on {scheme(settings)}://{host}:{port}", flush=True)
    server = HttpServer(app, edge=app.state.http_edge, ssl_context=server_context(settings),
                        writes=app.state.lean_writes if lean else None, signals=True)
    with sock:
        code = run(server.serve(sock))
    if code:
        sys.exit(code)
