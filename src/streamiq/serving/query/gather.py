"""One scatter-gather query run through the coordinator: freshness, position waits,
the peers' parts and the partitions no replica could answer.

A query from a client is split by partition across replicas (each partition answered
exactly once) and merged here; a peer's part (``Caller.forwarded``, with the explicit
``partitions``) is answered here only, for what this node holds. A partial answer to a
query with a position is refused (``NOT_UP_TO_BOUND``): it would not read the writes
it must.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from streamiq.errors import BadRequest, NotUpToBound
from streamiq.serving.engines.partials import P
from streamiq.serving.query.codec import ask
from streamiq.serving.query.model import Caller, Gathered, PeerPart, Query
from streamiq.serving.query.reads import Reads
from streamiq.views.base import View

__all__ = ["Gather", "explicit_partitions"]

R = TypeVar("R")


def explicit_partitions(raw: str | Sequence[int], n: int) -> list[int]:
    """A peer's ``partitions`` (``"0,2"`` or a list), each in 0..n-1, or a 400 naming
    them."""
    try:
        parts = sorted({int(p) for p in (raw.split(",") if isinstance(raw, str) else raw)})
    except ValueError:
        raise BadRequest(f"partitions: expected integers, got {raw!r}",
                         field="partitions") from None
    if any(not 0 <= p < n for p in parts):
        raise BadRequest(f"partitions: out of range 0..{n - 1}", field="partitions")
    return parts


class Gather(Generic[P]):
    """Runs one scatter-gather query ``q`` of view ``view`` for ``caller``."""

    def __init__(self, reads: Reads, q: Query, view: View, caller: Caller) -> None:
        self.reads = reads
        self.q = q
        self.view = view
        self.caller = caller
        fresh = q.fresh
        self.max_lag = reads.max_lag(fresh.max_lag)
        self.tokens = reads.tokens(fresh.position)
        self.deadline = reads.deadline(caller, fresh)
        self.wait_s = reads.wait_s(fresh.wait_ms, self.deadline)
        self.all = list(range(reads.node.partitions[view.name]))
        if caller.forwarded and caller.partitions is not None:
            self.all = explicit_partitions(caller.partitions, len(self.all))

    async def run(self, local: Callable[[list[int]], Awaitable[P]],
                  finish: Callable[[list[P]], R], partitions: list[int] | None = None,
                  part: Callable[[list[int]], Query] | None = None
                  ) -> Gathered[R] | PeerPart[P]:
        """Each partition's ``local`` part, here or on a peer, merged by ``finish``."""
        reads, wanted = self.reads, self.all if partitions is None else partitions

        async def up_to_position(held: list[int]) -> P:
            """Every partition read reflects the position first (NOT_UP_TO_BOUND if one
            does not within the wait; a peer's refusal makes the entry ask another)."""
            if held and (self.tokens or self.q.fresh.max_staleness_ms is not None):
                tokens, wait = await reads.bounded(self.view.name, self.q.fresh,
                                                   self.tokens, self.wait_s)
                await asyncio.gather(*(reads.check_position(
                    self.view.name, p, tokens, wait) for p in held))
            return await local(held)

        to_peers = ask(self.q, self.caller.authorization,
                       reads.node.partitions[self.view.name], self.deadline, part)
        partials, missing, hops = await reads.coordinator.gather(
            to_peers, self.caller.forwarded, self.view.name, wanted, self.max_lag,
            up_to_position)
        node = reads.node.endpoint
        if self.caller.forwarded:
            return PeerPart(partials[0] if partials else None, missing, node)
        if missing and self.tokens:  # a partial answer would not read the writes it must
            raise NotUpToBound(f"no replica reflected the position within "
                               f"{self.wait_s:.3f}s for partitions {missing}",
                               missing_partitions=missing, served_by=node)
        return Gathered(self.view.name, finish(partials), len(wanted), missing, hops, node)
