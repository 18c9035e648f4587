"""One scatter-gather query run through the coordinator: freshness, position waits,
the peers' parts and the partitions no replica could answer.

A query from a client is split by partition across replicas (each partition answered
exactly once) and merged here; a peer's part (``Caller.forwarded``, with the explicit
``partitions``) is answered here only, for what this node holds. A partial answer to a
query with a position is refused (``NOT_UP_TO_BOUND``): it would not read the writes
it must.

A consistent read (``Freshness.consistent``) is answered at one cut of the input: the
entry chooses it (ticks written now, ``Node.recent_input``), every partition waits until
it reflects the cut and is read at it (``atcut.py``); a replica that finds no version of
a key at exactly the cut names a lower one (``CutMoved``) and the entry asks every
partition again at it, or at a new cut when the versions kept no longer reach back
(``serving/changelog/rounds.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from streamiq.errors import BadRequest, NotUpToBound
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.changelog.cuts import Cut, cut_of, cut_token
from streamiq.serving.changelog.rounds import at_one_cut
from streamiq.serving.engines.partials import P
from streamiq.serving.query.codec import ask
from streamiq.serving.query.model import Caller, Gathered, PeerPart, Query
from streamiq.serving.query.reads import Reads
from streamiq.state.base import Reader
from streamiq.views.base import View

__all__ = ["Gather", "explicit_partitions"]

R = TypeVar("R")


def explicit_partitions(raw: Sequence[int], n: int) -> list[int]:
    """A peer's ``partitions``, each an integer in 0..n-1, or a 400 naming them."""
    if any(type(p) is not int for p in raw):
        raise BadRequest(f"partitions: expected integers, got {list(raw)!r:.100}",
                         field="partitions")
    parts = sorted(set(raw))
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

    async def run(self, local: Callable[[list[int], Reader], Awaitable[P]],
                  finish: Callable[[list[P]], R], partitions: list[int] | None = None,
                  part: Callable[[list[int]], Query] | None = None
                  ) -> Gathered[R] | PeerPart[P]:
        """Each partition's ``local`` part (given the rows to read: the store, or the
        store at the query's cut), here or on a peer, merged by ``finish``."""
        wanted = self.all if partitions is None else partitions
        fresh = self.q.fresh
        if not fresh.consistent:
            return await self._run(self.q, None, local, finish, wanted, part)
        if self.caller.forwarded:  # the entry chose the cut
            return await self._run(self.q, self._peer_cut(fresh.cut), local, finish, wanted,
                                   part)
        if fresh.cut is not None:  # chosen before (a scan's first page, a SQL statement):
            given = self._peer_cut(fresh.cut)  # that one only; CutMoved to the caller
            got = await self._run(self.q, given, local, finish, wanted, part)
            assert isinstance(got, Gathered)
            return dataclasses.replace(got, cut=cut_token(given))

        async def attempt(cut: Cut) -> Gathered[R]:
            q = dataclasses.replace(self.q, fresh=dataclasses.replace(fresh, cut=cut_token(cut)))
            got = await self._run(q, cut, local, finish, wanted, part)
            assert isinstance(got, Gathered)
            return got

        def moved() -> None:
            self.reads.coordinator.traffic.cut_moved += 1

        answer, cut = await at_one_cut(
            await self._new_cut(), attempt, lambda: self._new_cut(settled=False),
            f"{self.view.name}'s input", deadline=self.deadline, moved=moved,
            served_by=self.reads.node.endpoint)
        return dataclasses.replace(answer, cut=cut_token(cut))

    async def _new_cut(self, settled: bool = True) -> Cut:
        """A cut at or past the query's position: one this node already reflects (a
        first try), or past every record appended before now (``Reads.new_cut``)."""
        fresh = self.q.fresh
        return cut_of(parse_tokens(await self.reads.new_cut(
            [self.view.name], fresh.position, fresh.wait_ms, settled=settled)))

    def _peer_cut(self, raw: str | None) -> Cut:
        try:
            return cut_of(parse_tokens(raw or ""))
        except ValueError as exc:
            raise BadRequest(f"cut: {exc}", field="cut") from None

    async def _run(self, q: Query, cut: Cut | None,
                   local: Callable[[list[int], Reader], Awaitable[P]],
                   finish: Callable[[list[P]], R], wanted: list[int],
                   part: Callable[[list[int]], Query] | None) -> Gathered[R] | PeerPart[P]:
        reads, fresh, name = self.reads, q.fresh, self.view.name
        store = reads.node.stores[name]
        tokens = self.tokens + [(t, p, o) for (t, p), o in (cut or {}).items()]

        async def up_to_position(held: list[int]) -> P:
            """Every partition read reflects the position first (NOT_UP_TO_BOUND if one
            does not within the wait; a peer's refusal makes the entry ask another),
            then is read (at the cut, if any)."""
            if held and (tokens or fresh.max_staleness_ms is not None):
                bound, wait = await reads.bounded(name, fresh, tokens, self.wait_s)
                await asyncio.gather(*(reads.check_position(name, p, bound, wait)
                                       for p in held))
            if cut is None or not held:
                return await local(held, store)
            at = await reads.at_cut(name, held, cut)
            got = await local(held, at)
            at.finish()
            return got

        sub = part if part is None else (
            lambda ps: dataclasses.replace(part(ps), fresh=fresh))  # the cut goes too
        to_peers = ask(q, self.caller.authorization, reads.node.partitions[name],
                       self.deadline, sub)
        partials, missing, hops = await reads.coordinator.gather(
            to_peers, self.caller.forwarded, name, wanted, self.max_lag, up_to_position)
        node = reads.node.endpoint
        if self.caller.forwarded:
            return PeerPart(partials[0] if partials else None, missing, node)
        if missing and tokens:  # a partial answer would not read the writes it must
            said = reads.node.router.states(name, missing, self.max_lag)
            raise NotUpToBound(f"no replica reflected the position within "
                               f"{self.wait_s:.3f}s for partitions {missing} ({said})",
                               missing_partitions=missing, served_by=node)
        return Gathered(name, finish(partials), len(wanted), missing, hops, node)
