"""The entry node's side of a subscription to an owner over the peer protocol: one
request of kind ``changes`` on a peer stream of its own (``serving/cluster/stream.py``),
each reply frame an event (``serving/peer/changes.py``).

When the reader falls behind, the stream stops reading (TCP pushes back to the owner,
whose subscription coalesces). A stream that is lost, an error frame, or ``HANG_S``
without any frame (the owner sends one at least every second) raises ``PeerError``: the
merge resumes the partitions elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from ssl import SSLContext

import orjson

from streamiq.errors import from_problem
from streamiq.serving.changes.stream import Event
from streamiq.serving.cluster.stream import stream
from streamiq.serving.query.codec import changes_request
from streamiq.serving.query.model import Changes

__all__ = ["HANG_S", "upstream"]

#: no frame for this long: the owner is taken for hung (its heartbeat is every 1 s)
HANG_S = 3.0


async def upstream(address: str, mark: str, ssl: SSLContext | None, query: Changes,
                   partitions: list[int], count: int, token: str | None
                   ) -> AsyncIterator[Event]:
    """The owner's events for ``query`` over ``partitions``; ``PeerError`` when the
    owner is gone, hangs or refuses."""
    body = changes_request(query, partitions, count, token)
    frames = stream(address, mark, ssl, body, HANG_S)
    try:
        async for status, raw in frames:
            if status != 200:
                raise from_problem(status, raw)
            doc = orjson.loads(raw)
            data = doc.get("d")
            yield Event(data=None if data is None else orjson.dumps(data), id=doc.get("i"),
                        kind=doc.get("e"))
    finally:
        await frames.aclose()
