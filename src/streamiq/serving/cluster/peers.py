"""How a node asks the others: the lookup wire for forwarded key lookups, one HTTP hop
for everything else, and every transport failure as a ``PeerError``.

Two transports, no more. A forwarded key lookup goes over the lookup wire
(``wire.py``, client ``hop.py``) unless the peer does not speak it; every
other call to a peer (the full routes' forwards, scatter-gather partials, the lookup's
HTTP fallback) is one HTTP request on the pooled aiohttp session (``Peers.send``).
Both clients raise their own transport errors; they become a ``PeerError`` here, in one
place (``peer_error``: gone, ``PeerUnreachable``, a suspect; slow, ``PeerTimeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from streamiq import tls
from streamiq.config import Settings
from streamiq.errors import PeerError, PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.hop import HopClient, HopReply
from streamiq.serving.cluster.wire import WireUnsupported
from streamiq.serving.engines._json import loads_row

__all__ = ["CONNECTION_LOST", "FORWARDED", "FORWARD_SLACK_S", "TRANSPORT_ERRORS", "Ask",
           "Params", "Peers", "Reply", "Send", "hop_headers", "peer_error"]

log = logging.getLogger("streamiq.routing")

FORWARDED = "x-streamiq-forwarded"
Params = list[tuple[str, str]]
#: A replica that cannot be reached (refused, reset, timed out).
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
#: Of those, the ones that say the replica is gone (not merely slow): only these make it
#: a suspect. A slow answer (e.g. a long position wait) is retried elsewhere, not blamed.
CONNECTION_LOST = (aiohttp.ClientConnectorError, aiohttp.ClientOSError,
                   aiohttp.ServerDisconnectedError, ConnectionError)
#: Time a forwarded request may take beyond the position wait it carries.
FORWARD_SLACK_S = 10.0


def hop_headers(mark: str, authorization: str | None) -> dict[str, str]:
    """The headers of a request forwarded to a peer: the mark (the cluster credential,
    ``streamiq.auth.hop_mark``), and the client's Authorization (the owner checks it
    again). Every HTTP hop uses these."""
    h = {FORWARDED: mark}
    if authorization is not None:
        h["authorization"] = authorization
    return h


def peer_error(address: str, exc: BaseException) -> PeerError:
    """A transport failure of a peer as a ``PeerError``: the one place the clients'
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


@dataclass(frozen=True)
class Ask:
    """What a node asks its peers for a query, rendered from the typed query
    (``serving/query/``), never copied from an incoming request: ``method``, ``path``
    (percent-encoded), the query ``params`` (a scatter-gather adds ``partitions``), the
    JSON ``body`` for a list of partitions, the client's ``authorization`` (the owner
    checks it again) and the seconds the peer may take (``timeout``)."""

    method: str
    path: str
    params: Params = field(default_factory=list)
    body: Callable[[list[int]], Any] | None = None
    authorization: str | None = None
    timeout: float = FORWARD_SLACK_S


#: how a peer is asked over HTTP: (method, address, path, params, JSON body, headers,
#: timeout) -> its reply; the pooled aiohttp session unless a test gives another
Send = Callable[[str, str, str, Params, Any, dict[str, str], float], Awaitable[Reply]]


class Peers:
    """This node's calls to other nodes (``suspect`` is told of peers that are gone)."""

    def __init__(self, settings: Settings, mark: str, suspect: Callable[[str], None],
                 send: Send | None = None) -> None:
        self.mark = mark  # the cluster credential every call carries
        self._suspect = suspect
        self._send: Send = send or self._send_http
        self.scheme = tls.scheme(settings)  # peers are reached as this node is (tls.py)
        self._ssl = tls.client_context(settings)
        # aiohttp, not httpx, for node-to-node calls: measured ~0.2 ms of client CPU per
        # call against ~1.7 ms for httpx (bench/bench_queries.py, forwarded lookups).
        self._session: aiohttp.ClientSession | None = None
        self.hop = HopClient(mark=mark.encode(), ssl=self._ssl)  # the lookup wire
        self._http_hops = 0  # key lookups' HTTP hops answered (http_hop)

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

    async def close(self) -> None:
        self.hop.close()
        if self._session is not None:
            await self._session.close()

    async def send(self, address: str, ask: Ask, partitions: list[int] | None = None
                   ) -> Reply:
        """The one HTTP hop: ``ask`` marked forwarded, with the client's Authorization;
        for a scatter-gather, the ``partitions`` the peer answers (a parameter, and the
        body made for them). Raises ``PeerError``."""
        params, body = ask.params, None
        if partitions is not None:
            params = [*params, ("partitions", ",".join(map(str, partitions)))]
            body = ask.body(partitions) if ask.body else None
        try:
            return await self._send(ask.method, address, ask.path, params, body,
                                    hop_headers(self.mark, ask.authorization), ask.timeout)
        except TRANSPORT_ERRORS as exc:
            raise peer_error(address, exc) from exc

    async def _send_http(self, method: str, address: str, path: str, params: Params,
                         body: Any, headers: dict[str, str],
                         timeout: float = FORWARD_SLACK_S) -> Reply:
        host, _, port = address.rpartition(":")
        url = URL.build(scheme=self.scheme, host=host, port=int(port), path=path, encoded=True)
        async with self.session().request(method, url, params=params, json=body,
                                          headers=headers, allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=timeout,
                                                                        connect=1.0)) as r:
            content = await r.read()
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, content)

    async def http_hop(self, address: str, raw_path: str, headers: dict[str, str],
                       timeout: float = FORWARD_SLACK_S) -> HopReply:
        """A key lookup's HTTP hop (a peer without the lookup wire): a GET through the one
        HTTP hop, the reply's headers lower-cased (relayed as they came). Transport
        failures are raised as they are (``forward_lookup`` maps them)."""
        r = await self._send("GET", address, raw_path, [], None, headers, timeout)
        self._http_hops += 1
        return HopReply(r.status_code, {k.encode("latin-1"): v.encode("latin-1")
                                        for k, v in r.headers.items()}, r.content)

    async def forward_lookup(self, address: str, frame: bytes | None, raw_path: bytes,
                             authorization: bytes | None) -> HopReply:
        """A key lookup forwarded to ``address``: over the lookup wire (``frame``, when
        the peer speaks it), else the HTTP hop. Raises ``PeerError``."""
        try:
            if frame is not None:
                # an older node or an HTTP-only proxy: WireUnsupported, then HTTP hops
                with contextlib.suppress(WireUnsupported):
                    return await self.hop.fetch(address, frame)
            return await self.http_hop(address, raw_path.decode("latin-1"), hop_headers(
                self.mark, None if authorization is None else authorization.decode("latin-1")))
        except TRANSPORT_ERRORS as exc:
            raise peer_error(address, exc) from exc

    def unreachable(self, err: PeerError) -> None:
        """A replica could not be asked: suspect it if it is gone, log either way."""
        if isinstance(err, PeerUnreachable):
            log.warning("replica %s unreachable (%r); trying the next", err.address, err.cause)
            self._suspect(err.address)
        else:
            log.warning("replica %s did not answer (%r); trying the next", err.address,
                        err.cause)

    def hop_stats(self) -> dict[str, Any]:
        """Key lookups' hops answered per transport, and the peers getting HTTP hops only
        for now (``/health``)."""
        return {**self.hop.stats(), "http": self._http_hops}
