"""What every query needs of this node: its views, freshness, stamps, position waits,
and a key lookup's one decision and store read.

``Reads`` is the base of ``Queries`` (``run.py``); the HTTP front end's ``Answers``
(``serving/http/answers.py``), the lean path and the peer server use the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson

from streamiq.errors import BadRequest, NotActive, NotFound, NotUpToBound, UnknownView
from streamiq.serving.changelog.consistency import Token, parse_tokens
from streamiq.serving.changelog.cuts import Cut, cut_of, cut_token
from streamiq.serving.cluster.coordinator import Coordinator
from streamiq.serving.cluster.placement import Forward, Here, Redirect, Refuse, not_held
from streamiq.serving.node import Node
from streamiq.serving.query.atcut import AtCut
from streamiq.serving.query.model import Caller, Freshness, Read
from streamiq.views.base import View

__all__ = ["BUDGET_S", "Reads", "check_key", "not_found_body"]

#: a client's budget when it gives none (a query with a position: plus its wait)
BUDGET_S = 10.0


def check_key(view: View, key: str, field: str = "key") -> None:
    """A key ``view`` can hold, or a 400 naming ``field`` and what is wrong (empty, the
    wrong columns, too long, not valid Unicode)."""
    if not key:
        raise BadRequest(f"{field}: the key is empty (a {view.name!r} key has the form "
                         f"{'|'.join(view.key_columns)!r})", field=field)
    try:
        view.parse_key(key)
    except ValueError as exc:
        raise BadRequest(f"{field}: {exc}", field=field) from None


def not_found_body(view: View, key: str, p: int, stamp: dict[str, Any]) -> bytes:
    """The body of a lookup's 404 (the regular route and the wire give the same)."""
    return NotFound(f"no {view.name} row for key {key!r}", key=key, partition=p,
                    **stamp).render()


class Reads:
    """This node's views, freshness settings, stamps and position waits, and a key
    lookup's decision and read."""

    def __init__(self, node: Node, coordinator: Coordinator) -> None:
        self.node = node
        self.coordinator = coordinator

    def view(self, name: str) -> View:
        v = self.node.views.get(name)
        if v is None:
            raise UnknownView(f"no view named {name!r}", views=sorted(self.node.views))
        return v

    def max_lag(self, value: int | None) -> int:
        return self.node.settings.max_lag if value is None else value

    @staticmethod
    def tokens(raw: str | None) -> list[Token]:
        if not raw:
            return []
        try:
            return parse_tokens(raw)
        except ValueError as exc:
            raise BadRequest(f"position: {exc}") from None

    def wait_s(self, wait_ms: int | None, deadline: float | None = None) -> float:
        """A position wait's bound: ``wait_ms`` (None: the node's), within ``deadline``."""
        wait = (self.node.settings.wait_timeout_ms if wait_ms is None else wait_ms) / 1000
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - asyncio.get_running_loop().time()))
        return wait

    def deadline(self, caller: Caller, fresh: Freshness) -> float:
        """When the answer is due (the event loop's time): the caller's deadline, else
        ``BUDGET_S`` from now, plus the position wait of a query with a position."""
        if caller.deadline is not None:
            return caller.deadline
        budget = BUDGET_S + (self.wait_s(fresh.wait_ms) if fresh.waits else 0.0)
        return asyncio.get_running_loop().time() + budget

    def stamp(self, view: str, partition: int, here: Here | None = None) -> dict[str, Any]:
        """Who answers: this node, its role for the partition and its lag (as placed)."""
        if here is None:
            role = self.coordinator.placement.role(view, partition)
            here = Here(role, self.node.lag(view, partition))
        return {"served_by": self.node.endpoint, "role": here.role, "lag": here.lag}

    def not_held(self, view: str, partition: int) -> NotActive:
        return not_held(self.node.endpoint, view, partition)

    async def bounded(self, view: str, fresh: Freshness, tokens: list[Token],
                      wait_s: float) -> tuple[list[Token], float]:
        """The position a read waits for: ``tokens`` and, with ``max_staleness_ms``, this
        node's recent ticks (``Node.recent_input``); and what is left of ``wait_s``."""
        if fresh.max_staleness_ms is None:
            return tokens, wait_s
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        recent = await self.node.recent_input(view, fresh.max_staleness_ms / 1000, wait_s)
        return tokens + recent, max(0.0, wait_s - (loop.time() - t0))

    async def new_cut(self, views: Sequence[str], position: str | None,
                      wait_ms: int | None, field: str = "consistent",
                      settled: bool = True) -> str:
        """A cut of the input of ``views``, at or past ``position``, as a position token:
        one this node's partitions already reflect, at most ``SETTLED_S`` old
        (``Node.settled_cut``; ``settled``), else past every record appended before now
        (ticks written now to each input partition, ``Node.recent_input``).
        ``BadRequest`` naming ``field`` for a view without ticks."""
        wait = self.wait_s(wait_ms)
        tokens = list(self.tokens(position))
        for name in dict.fromkeys(views):
            view = self.view(name).name
            done = self.node.settled_cut(view) if settled else None
            tokens += done if done is not None else await self.node.recent_input(
                view, 0.0, wait, field=field)
        return cut_token(cut_of(tokens))

    async def at_cut(self, view: str, held: list[int], cut: Cut) -> AtCut:
        """The view's rows in ``held`` as of ``cut`` (each partition reflects it):
        ``CutMoved`` if a partition's versions do not reach back to it. A partition that
        kept none starts now, its floor the input's ends read after that."""
        histories = {}
        for p in held:
            st = self.node.materializer.states.get((view, p))
            if st is None:
                raise self.not_held(view, p)
            if st.history is None:
                raise BadRequest(f"view {view!r} is windowed: its reads have no cut",
                                 field="consistent")
            st.history.activate()
            histories[p] = st.history
        if any(h.floor is None for h in histories.values()):
            ends = await self.node.input_ends(view)
            for h in histories.values():
                h.floor_at(ends)
        return AtCut(self.node.stores[view], histories, cut)

    async def check_position(self, view: str, partition: int, tokens: list[Token],
                             wait_s: float, key: bytes | None = None) -> None:
        """Wait until the partition reflects ``tokens`` (``key``: a key lookup's store
        key, whose row may reflect them first), or NOT_UP_TO_BOUND."""
        if tokens and not await self.node.wait_position(view, partition, tokens, wait_s, key):
            raise NotUpToBound(f"{self.node.endpoint} has not reflected the position within "
                               f"{wait_s:.3f}s", partition=partition,
                               served_by=self.node.endpoint)

    def decide(self, view: View, key: str, p: int, max_lag: int
               ) -> Read | Forward | Redirect | Refuse:
        """The one decision of a client's key lookup (``Placement.place``), with the
        store read once when this node answers: ``Read`` (200 and the row, or 404 and
        its problem document), else where it goes or why it is refused. The lean path
        answers with it; the full route walks the same placement."""
        d = self.coordinator.placement.place(view.name, p, max_lag, [])
        if isinstance(d, Here):
            return self.read(view, key, p, d)
        return d

    def answer_peer(self, view: View, key: str, p: int) -> Read | Refuse:
        """A peer's key lookup (``Placement.for_peer``): ``Read`` here, or refused (421:
        this node does not hold the partition)."""
        d = self.coordinator.placement.for_peer(view.name, p)
        if isinstance(d, Here):
            return self.read(view, key, p, d)
        return d

    def read(self, view: View, key: str, p: int, here: Here) -> Read:
        """A key lookup this node answers from partition ``p``, as ``here`` says (its
        role and lag, for the stamp): the same bytes on every path. The stored row is
        written as it is (an ``orjson.Fragment``: not decoded and encoded again)."""
        node = self.node
        raw = node.stores[view.name].get(p, key.encode())  # store_key of a keyed view
        if raw is None:
            return Read(404, not_found_body(view, key, p, self.stamp(view.name, p, here)))
        # the stored row goes in as it is (checked JSON when it was materialized)
        doc = {"view": view.name, "key": key, "partition": p, "value": orjson.Fragment(raw),
               "served_by": node.endpoint, "role": here.role, "lag": here.lag}
        return Read(200, orjson.dumps(doc))  # a key is valid Unicode (check_key)
