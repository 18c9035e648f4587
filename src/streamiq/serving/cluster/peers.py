"""How a node asks the others: one peer protocol for every query, and every transport
failure as a ``PeerError``.

Every call to a peer is one request of the peer protocol (``wire.py``, client
``hop.py``): a forwarded lookup, a key's windows, each part of a scatter-gather. What is
asked is an ``Ask``, rendered from the typed query by the query layer
(``serving/query/codec.py``): its kind, its fields, the view's partition count, the
client's credential and the deadline. The client's transport errors become a
``PeerError`` here, in one place (``peer_error``: gone, ``PeerUnreachable``, a suspect;
slow, ``PeerTimeout``), and each answer's latency goes to the hedge delays
(``hedge.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from streamiq import tls
from streamiq.config import Settings
from streamiq.errors import CutMoved, PeerError, PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.hedge import Hedging
from streamiq.serving.cluster.hop import HopClient
from streamiq.serving.cluster.wire import PeerReply, request_body

__all__ = ["CONNECTION_LOST", "TRANSPORT_ERRORS", "Ask", "PeerReply", "Peers", "Send",
           "peer_error"]

log = logging.getLogger("streamiq.routing")

#: A replica that cannot be reached (refused, reset, timed out).
TRANSPORT_ERRORS = (asyncio.TimeoutError, OSError)
#: Of those, the ones that say the replica is gone (not merely slow): only these make it
#: a suspect. A slow answer (e.g. a long position wait) is retried elsewhere, not blamed.
CONNECTION_LOST = (ConnectionError,)


def peer_error(address: str, exc: BaseException) -> PeerError:
    """A transport failure of a peer as a ``PeerError``: the one place the client's
    exceptions are told apart (gone: ``PeerUnreachable``; slow: ``PeerTimeout``)."""
    kind = PeerUnreachable if isinstance(exc, CONNECTION_LOST) else PeerTimeout
    return kind(address, exc)


class Ask:
    """What a node asks its peers for a query, rendered from the typed query
    (``serving/query/codec.py``), never copied from an incoming request: the query's
    ``kind`` and ``fields`` (``part``: its fields for the partitions one peer answers,
    e.g. a multi-get's keys of those), the view's partition ``count``, the client's
    ``authorization`` (the owner checks it again) and the ``deadline`` (the event loop's
    time) past which nobody waits for the answer. ``gone``: the replicas found gone
    (connection refused or lost) while this query is answered, never asked again for it.
    ``unread``: per partition, the last refusal of a replica that kept no versions back
    to the query's cut (``CutMoved`` naming no lower cut): another replica may have them;
    if none has, the gather raises it (the entry takes a new cut)."""

    __slots__ = ("authorization", "count", "deadline", "fields", "gone", "kind", "part",
                 "unread")

    def __init__(self, kind: str, fields: Any, count: int, authorization: str | None,
                 deadline: float, part: Callable[[list[int]], Any] | None = None) -> None:
        # by hand: made per forwarded lookup, a dataclass's __init__ was twice the work
        self.kind, self.fields, self.count = kind, fields, count
        self.authorization, self.deadline, self.part = authorization, deadline, part
        self.gone: set[str] = set()
        self.unread: dict[int, CutMoved] = {}

    def body(self, partitions: list[int]) -> bytes:
        fields = self.part(partitions) if self.part is not None else self.fields
        return request_body(self.kind, fields, partitions, self.count, self.authorization)


#: how a peer is asked: (address, request body, deadline) -> its reply; the pooled peer
#: protocol client unless a test gives another
Send = Callable[[str, bytes, float], Awaitable[PeerReply]]


class Peers:
    """This node's calls to other nodes (``suspect`` is told of peers that are gone)."""

    def __init__(self, settings: Settings, mark: str, suspect: Callable[[str], None],
                 send: Send | None = None) -> None:
        self.mark = mark  # the cluster credential every connection carries
        self._suspect = suspect
        self.scheme = tls.scheme(settings)  # peers are reached as this node is (tls.py)
        self.hop = HopClient(mark=mark.encode(), ssl=tls.client_context(settings))
        self._send: Send = send or self.hop.fetch
        self.pooled = send is None  # False: a test's ``send`` is every call's
        self.hedging = Hedging()  # latency per peer and kind, suspects, hedges sent

    async def close(self) -> None:
        self.hop.close()

    async def ask(self, address: str, ask: Ask, partitions: list[int]) -> PeerReply:
        """One request of the peer protocol; its latency is measured for the hedge delays.
        Raises ``PeerError``."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            reply = await self._send(address, ask.body(partitions), ask.deadline)
        except TRANSPORT_ERRORS as exc:
            err = peer_error(address, exc)
            if isinstance(err, PeerUnreachable):
                ask.gone.add(address)
            raise err from exc
        self.hedging.observe(address, ask.kind, loop.time() - t0)
        return reply

    def unreachable(self, err: PeerError) -> None:
        """A replica could not be asked: suspect it if it is gone, log either way."""
        if isinstance(err, PeerUnreachable):
            log.warning("replica %s unreachable (%r); trying the next", err.address, err.cause)
            self._suspect(err.address)
        else:
            log.warning("replica %s did not answer (%r); trying the next", err.address,
                        err.cause)

    def stats(self) -> dict[str, Any]:
        """Replies from peers and the hedges sent (``/health``)."""
        return {"replies": self.hop.answered(), "hedges": self.hedging.totals()}
