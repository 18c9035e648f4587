"""Request routing between nodes: key routing and partition-exact scatter-gather.

A request from a client may be answered locally, forwarded to one replica (key
lookups) or split by partition across replicas (multi-get, scans, aggregates). A
forwarded request carries the ``X-Streamiq-Forwarded`` mark and the explicit
``partitions`` it must answer; a node never forwards a marked request, so there are no
call cycles, and it answers NOT_ACTIVE (421) for a partition it does not hold instead
of "not found". Each partition is answered exactly once, by one replica; partitions
no replica could answer are returned as ``missing`` so the caller reports PARTIAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, AnyStr
from urllib.parse import quote

import aiohttp
from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from yarl import URL

from streamiq import tls
from streamiq._http import error_response
from streamiq.auth import Authenticator, hop_mark
from streamiq.errors import (
    BadRequest,
    PeerError,
    PeerTimeout,
    PeerUnreachable,
    Unauthenticated,
)
from streamiq.routing.router import Endpoint
from streamiq.serving._json import loads_row
from streamiq.serving.hop import HopClient, HopReply
from streamiq.serving.node import Node
from streamiq.serving.partials import GatherReply, P
from streamiq.serving.placement import Here, Placement, Redirect, Refuse
from streamiq.serving.routes import view_of
from streamiq.serving.traffic import Traffic, log_summaries
from streamiq.serving.wire import WireUnsupported

__all__ = ["FORWARDED", "HOPS", "SERVED_BY", "TRANSPORT_ERRORS", "Coordinator",
           "Reply", "hop_headers", "peer_error", "relayed_headers"]

log = logging.getLogger("streamiq.routing")

FORWARDED = "x-streamiq-forwarded"
HOPS = "x-streamiq-hops"
SERVED_BY = "x-streamiq-served-by"

LocalCall = Callable[[Here], Awaitable[Response]]

Params = list[tuple[str, str]]
#: A replica that cannot be reached (refused, reset, timed out).
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
#: Of those, the ones that say the replica is gone (not merely slow): only these make it
#: a suspect. A slow answer (e.g. a long position wait) is retried elsewhere, not blamed.
CONNECTION_LOST = (aiohttp.ClientConnectorError, aiohttp.ClientOSError,
                   aiohttp.ServerDisconnectedError, ConnectionError)
#: Time a forwarded request may take beyond the position wait it carries.
_FORWARD_SLACK_S = 10.0


def hop_headers(mark: str, authorization: str | None) -> dict[str, str]:
    """The headers of a request forwarded to a peer: the mark (the cluster credential,
    ``streamiq.auth.hop_mark``), and the client's Authorization (the owner checks it
    again). Every HTTP hop uses these."""
    h = {FORWARDED: mark}
    if authorization is not None:
        h["authorization"] = authorization
    return h


def relayed_headers(headers: Mapping[AnyStr, AnyStr], prefix: AnyStr, hops: AnyStr
                    ) -> list[tuple[AnyStr, AnyStr]]:
    """The owner's ``x-streamiq-*`` headers an entry relays to its client (all but the
    hop count, which the entry sets); ``prefix`` and ``hops`` as str or bytes."""
    return [(k, v) for k, v in headers.items() if k.startswith(prefix) and k != hops]


def raw_path(request: Request) -> str:
    """The path as the client wrote it, percent-encoding and all (a key may hold
    ``%2F``: ``serving/paths.py``), for the same request to a peer."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(request.url.path)


def peer_error(address: str, exc: BaseException) -> PeerError:
    """A transport failure of a peer as a ``PeerError``: the one place the HTTP client's
    exceptions are told apart (gone: ``PeerUnreachable``; slow: ``PeerTimeout``)."""
    kind = PeerUnreachable if isinstance(exc, CONNECTION_LOST) else PeerTimeout
    return kind(address, exc)


@dataclass
class Reply:
    """A node-to-node answer: status, lower-cased headers, body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        return loads_row(self.content)  # a peer's partial answer: json.loads's value


#: how a peer is asked over HTTP: (method, address, path, params, JSON body, headers,
#: timeout) -> its reply; the pooled aiohttp session unless a test gives another
Send = Callable[[str, str, str, Params, Any, dict[str, str], float], Awaitable[Reply]]


class Coordinator:
    def __init__(self, node: Node, send: Send | None = None) -> None:
        self.node = node
        self._send: Send = send or self._send_http
        s = node.settings
        # aiohttp, not httpx, for node-to-node calls: measured ~0.2 ms of client CPU per
        # call against ~1.7 ms for httpx (bench/bench_queries.py, forwarded lookups).
        self._session: aiohttp.ClientSession | None = None
        # client tokens, and the credential forwarded requests carry (streamiq/auth.py)
        self.auth = Authenticator.from_settings(s)
        self.mark = hop_mark(s.cluster_secret.get_secret_value()
                             if s.cluster_secret else None)
        self.mark_bytes = self.mark.encode()
        self.scheme = tls.scheme(s)  # peers are reached as this node is (streamiq/tls.py)
        self._ssl = tls.client_context(s)
        self.hop = HopClient(mark=self.mark_bytes, ssl=self._ssl)  # the lean path's hop
        self._http_hops = 0  # the lean path's HTTP hops answered (http_hop)
        # forwarded requests from peers served at once (--internal-concurrency)
        self.peer_slots = asyncio.Semaphore(s.internal_concurrency)
        self.traffic = Traffic()  # counted, not logged, per answer (serving/traffic.py)
        # where a one-partition request is answered (serving/placement.py)
        self.placement = Placement(node, self.traffic, redirect=s.redirect)
        self.redirect = s.redirect
        p = self.placement
        self.role, self.preferred, self.forget = p.role, p.preferred, p.forget
        self.active_here, self.forget_roles = p.active_here, p.forget_roles
        self._summaries: asyncio.Task[None] | None = None

    def session(self) -> aiohttp.ClientSession:
        """The pooled keep-alive session (created inside the running event loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, limit_per_host=64,
                                               keepalive_timeout=30, ttl_dns_cache=None,
                                               ssl=self._ssl if self._ssl else True),
                timeout=aiohttp.ClientTimeout(total=10.0, connect=1.0),
                skip_auto_headers=("User-Agent",))
        return self._session

    def start(self, summary_period_s: float = 60.0) -> None:
        """Start the periodic traffic summary line (one per period with traffic)."""
        self._summaries = self.node.supervisor.task(
            "traffic-summary", lambda: log_summaries(self.traffic, summary_period_s))

    async def close(self) -> None:
        if self._summaries is not None:
            self._summaries.cancel()
        self.hop.close()
        if self._session is not None:
            await self._session.close()

    def is_forwarded(self, request: Request) -> bool:
        """A request from a peer: it carries the cluster credential."""
        got = request.headers.get(FORWARDED)
        return got is not None and self.is_mark(got.encode("latin-1"))

    def is_mark(self, got: bytes) -> bool:
        return hmac.compare_digest(got, self.mark_bytes)

    def check(self, request: Request) -> None:
        """Authenticate a request (every route but /health): a forwarded mark must carry
        the cluster credential (refused before it takes a peer slot), and the client's
        token must allow the view the path names. Raises ``Unauthenticated`` or
        ``Forbidden``."""
        if FORWARDED in request.headers and not self.is_forwarded(request):
            raise Unauthenticated("a request marked forwarded without the cluster "
                                  "credential")
        authorization = request.headers.get("authorization")
        route = request.scope.get("route")
        view = view_of(getattr(route, "path", None), request.path_params)
        if view is None:
            self.auth.principal(authorization)
        else:
            self.auth.reader(authorization, view)

    def _headers(self, request: Request) -> dict[str, str]:
        return hop_headers(self.mark, request.headers.get("authorization"))

    def budget(self, request: Request) -> float:
        """Seconds a forwarded request may take: its own position wait plus slack."""
        if "position" not in request.query_params:
            return _FORWARD_SLACK_S
        raw = request.query_params.get("wait_ms")
        wait_ms = int(raw) if raw and raw.isdigit() else self.node.settings.wait_timeout_ms
        return wait_ms / 1000 + _FORWARD_SLACK_S

    async def _call(self, address: str, request: Request, params: Params,
                    body: Any = None) -> Reply:
        """Ask a peer; any transport failure is raised as a ``PeerError``."""
        try:
            return await self._send(request.method, address, raw_path(request), params, body,
                                    self._headers(request), self.budget(request))
        except TRANSPORT_ERRORS as exc:
            raise peer_error(address, exc) from exc

    def unreachable(self, err: PeerError) -> None:
        """A replica could not be asked: suspect it if it refused, log either way."""
        if isinstance(err, PeerUnreachable):
            log.warning("replica %s unreachable (%r); trying the next", err.address, err.cause)
            self.node.membership.suspect(err.address)
        else:
            log.warning("replica %s did not answer (%r); trying the next", err.address,
                        err.cause)

    async def _send_http(self, method: str, address: str, path: str, params: Params, body: Any,
                    headers: dict[str, str], timeout: float = _FORWARD_SLACK_S) -> Reply:
        host, _, port = address.rpartition(":")
        url = URL.build(scheme=self.scheme, host=host, port=int(port), path=path, encoded=True)
        async with self.session().request(method, url, params=params, json=body,
                                          headers=headers, allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=timeout,
                                                                        connect=1.0)) as r:
            content = await r.read()
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, content)

    async def http_hop(self, address: str, raw_path: str, headers: dict[str, str],
                       timeout: float = _FORWARD_SLACK_S) -> HopReply:
        """A key lookup's HTTP hop (a peer without the lookup wire): a GET of the path as
        the client sent it, through the one HTTP hop every call to a peer takes
        (``Send``), the reply's headers lower-cased (relayed as they came). Transport
        failures are raised as they are (``TRANSPORT_ERRORS``; ``forward_lookup`` maps
        them)."""
        r = await self._send("GET", address, raw_path, [], None, headers, timeout)
        self._http_hops += 1
        return HopReply(r.status_code, {k.encode("latin-1"): v.encode("latin-1")
                                        for k, v in r.headers.items()}, r.content)

    async def forward_lookup(self, address: str, frame: bytes | None, raw_path: bytes,
                             authorization: bytes | None) -> HopReply:
        """A key lookup forwarded to ``address``: over the lookup wire (``frame``, when
        the peer speaks it), else one HTTP hop. Raises ``PeerError``."""
        try:
            if frame is not None:
                # an older node or an HTTP-only proxy: WireUnsupported, then HTTP hops
                with contextlib.suppress(WireUnsupported):
                    return await self.hop.fetch(address, frame)
            return await self.http_hop(address, raw_path.decode("latin-1"), hop_headers(
                self.mark, None if authorization is None else authorization.decode("latin-1")))
        except TRANSPORT_ERRORS as exc:
            raise peer_error(address, exc) from exc

    def hop_stats(self) -> dict[str, Any]:
        """The lean path's hops answered per transport, and the peers getting HTTP hops
        only for now (``/health``)."""
        return {**self.hop.stats(), "http": self._http_hops}

    # -- one partition (key lookups, a key's windows) --
    async def route(self, request: Request, view: str, partition: int, max_lag: int,
                    local: LocalCall, body: Any = None) -> Response:
        """Answer where ``Placement.place`` says: here (``local``), forwarded to one
        replica after another (a 421 or an unreachable one: the next), redirected, or
        refused (421 to a peer, 503)."""
        forwarded = self.is_forwarded(request)
        tried: list[str] = []
        while True:
            d = self.placement.place(view, partition, max_lag, forwarded, tried)
            if isinstance(d, Here):
                if forwarded:
                    async with self.peer_slots:  # requests served for peers at once
                        resp = await local(d)
                else:
                    resp = await local(d)
                resp.headers[HOPS] = "0"
                return resp
            if isinstance(d, Refuse):
                resp = error_response(d.error)
                if forwarded:
                    resp.headers[HOPS] = "0"
                return resp
            if isinstance(d, Redirect):
                target = f"{self.scheme}://{d.address}{raw_path(request)}"
                if request.url.query:
                    target += "?" + request.url.query
                return RedirectResponse(target, status_code=307)
            try:
                r = await self._call(d.address, request, request.query_params.multi_items(),
                                     body)
            except PeerError as err:
                self.unreachable(err)
                continue
            if r.status_code == 421:
                continue
            self.traffic.forwarded_to(d.address)
            headers = dict(relayed_headers(r.headers, "x-streamiq-", HOPS))
            headers[HOPS] = "1"
            return Response(r.content, r.status_code, headers=headers,
                            media_type=r.headers.get("content-type"))

    # -- many partitions (scatter-gather) --
    async def gather(self, request: Request, view: str, partitions: Sequence[int], max_lag: int,
                     local: Callable[[list[int]], Awaitable[P]],
                     params: Params | None = None,
                     body: Callable[[list[int]], Any] | None = None
                     ) -> tuple[list[P], list[int], int]:
        """Answer each partition exactly once; return (partials, missing, hops)."""
        # a list of pairs keeps repeated parameters (agg=...&agg=...)
        params = [(k, v) for k, v in (params if params is not None
                                      else request.query_params.multi_items())
                  if k != "partitions"]
        if self.is_forwarded(request):
            self.traffic.for_peers += 1
            async with self.peer_slots:
                held = [p for p in partitions if self.node.holds(view, p)]
                part = await local(held)
            missing = [p for p in partitions if p not in held]
            return [part], missing, 0
        self.traffic.fanout += 1
        pending = list(partitions)
        excluded: dict[int, set[str]] = defaultdict(set)
        partials: list[P | None] = []
        hops = 0
        for _attempt in range(3):
            plan = self._plan(view, pending, max_lag, excluded)
            unplanned = [p for p in pending if not any(p in ps for ps in plan.values())]
            calls = [self._gather_one(view, addr, ps, request, params, body, local)
                     for addr, ps in plan.items()]
            results = await asyncio.gather(*calls)
            pending = unplanned
            for addr, (got, not_done) in zip(plan, results, strict=True):
                if got is not None:
                    partials.append(got)
                    hops = max(hops, 0 if addr == self.node.endpoint else 1)
                for p in not_done:
                    excluded[p].add(addr)
                pending += not_done
            if not pending or not any(plan.values()):
                break
        return [p for p in partials if p is not None], sorted(set(pending)), hops

    def _plan(self, view: str, partitions: Sequence[int], max_lag: int,
              excluded: dict[int, set[str]]) -> dict[str, list[int]]:
        plan: dict[str, list[int]] = defaultdict(list)
        me = self.node.endpoint
        here_first = view in self.node.router.global_views  # held whole here: no hop
        for p in partitions:
            eps: list[Endpoint] = self.node.router.replicas(view, p, max_lag)
            if here_first:
                eps.sort(key=lambda e: e.address != me)
            choice = next((e for e in eps if e.address not in excluded[p]), None)
            if choice is not None:
                plan[choice.address].append(p)
        return dict(plan)

    async def _gather_one(self, view: str, address: str, parts: list[int], request: Request,
                          params: Params, body: Callable[[list[int]], Any] | None,
                          local: Callable[[list[int]], Awaitable[P]]
                          ) -> tuple[P | None, list[int]]:
        if address == self.node.endpoint:
            held = [p for p in parts if self.node.holds(view, p)]
            part = await local(held)
            return part, [p for p in parts if p not in held]
        q = [*params, ("partitions", ",".join(map(str, parts)))]
        try:
            r = await self._call(address, request, q, body(parts) if body else None)
        except PeerError as err:
            self.unreachable(err)
            return None, parts
        if r.status_code == 400:  # the query itself is refused (it would be here too)
            raise BadRequest(str(r.json().get("detail", "refused by a peer")),
                             peer=address)
        if r.status_code != 200:
            return None, parts
        doc: GatherReply[P] = r.json()
        return doc.get("partial"), [int(p) for p in doc.get("not_active", [])]
