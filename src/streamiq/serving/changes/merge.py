"""A subscription from any node: the owners' streams merged into one (issue 40).

The scope's partitions are grouped by the replica that serves each (the router's most
preferred; this node itself when it holds one: a local subscription), and each group is
one upstream: a local ``Subscription`` or a peer stream (``upstream.py``). Their events
are merged onto one position: every event with an ``id`` moves the partitions it names,
and the merged event carries the whole position. A fresh subscription's first rows carry
no id, and one ``ready`` comes once every group is ready.

When an upstream fails (the owner is gone, hangs past ``upstream.HANG_S``, refuses, or
ends because it no longer holds a partition), its partitions are subscribed again on
another replica from the position last delivered (a group that was not ready yet starts
over: its first rows may come twice, its changes never): the client sees no gap, no
duplicate and no reconnect. A replica that failed is asked last until one answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import orjson

from streamiq import tls
from streamiq.errors import Unavailable
from streamiq.serving.changes.position import parse, render
from streamiq.serving.changes.stream import Event, Scope, Subscription
from streamiq.serving.changes.upstream import HANG_S, upstream
from streamiq.serving.cluster.placement import Placement
from streamiq.serving.node import Node
from streamiq.serving.query.model import Changes

__all__ = ["Merge"]

log = logging.getLogger("streamiq.changes")

#: how long a subscription looks for a replica of a partition before it ends
_FIND_S = 30.0
_QUEUE = 64  # events queued from the upstreams before they wait for the client


@dataclass(frozen=True, eq=False)
class _Group:
    address: str
    partitions: tuple[int, ...]


class Merge:
    """See the module's docstring."""

    def __init__(self, node: Node, placement: Placement, mark: str, scope: Scope,
                 start: dict[int, int] | None, token: str | None) -> None:
        self.node = node
        self.placement = placement  # the one replica planner (cluster/placement.py)
        self.mark = mark
        self.ssl = tls.client_context(node.settings)
        self.scope = scope
        self.token = token
        self.fresh = start is None
        self.cursor: dict[int, int] = dict(start or {})
        self.waiting = set(scope.partitions)  # partitions whose group is not ready yet
        self.announced = not self.fresh  # events carry the merged position
        self.readied = False  # the merged ready sent
        self.failed: set[str] = set()
        self.queue: asyncio.Queue[tuple[_Group, Event | Exception]] = asyncio.Queue(_QUEUE)
        self.tasks: dict[_Group, asyncio.Task[None]] = {}

    # -- where each partition is read --
    def _groups(self, partitions: list[int]) -> list[_Group] | None:
        """Partitions by the replica to ask: this node for those it holds, the
        placement's plan for the others (failed upstreams last); None if one has none."""
        view = self.scope.view.name
        here = [p for p in partitions if self.node.holds(view, p)]
        elsewhere = [p for p in partitions if p not in here]
        by = self.placement.plan(view, elsewhere, self.node.settings.max_lag,
                                 last=self.failed)
        if sum(map(len, by.values())) < len(elsewhere):
            return None
        if here:
            by.setdefault(self.node.endpoint, []).extend(here)
        return [_Group(a, tuple(ps)) for a, ps in by.items()]

    def _why(self, partitions: list[int]) -> str:
        """Of the partitions no replica answers for, each one's members' states (at
        most 3): what a client's 503 says."""
        view, lag = self.scope.view.name, self.node.settings.max_lag
        missing = [p for p in partitions if not self.node.holds(view, p)
                   and not self.node.router.replicas(view, p, lag)]
        return self.node.router.states(view, missing, lag)

    async def _start(self, partitions: list[int]) -> None:
        deadline = asyncio.get_running_loop().time() + _FIND_S
        while (groups := self._groups(partitions)) is None:
            if asyncio.get_running_loop().time() > deadline:
                raise Unavailable(f"no replica of {self.scope.view.name!r} partitions "
                                  f"{partitions} within {_FIND_S:.0f}s "
                                  f"({self._why(partitions)})")
            await asyncio.sleep(0.2)
        for g in groups:
            self.tasks[g] = asyncio.get_running_loop().create_task(self._pump(g))

    # -- one upstream --
    def _events(self, g: _Group) -> AsyncIterator[Event]:
        ready = not self.fresh or not (set(g.partitions) & self.waiting)
        start = {p: self.cursor[p] for p in g.partitions} if ready else None
        keys = self.scope.keys
        if keys is not None:
            n = self.node.partitions[self.scope.view.name]
            keys = tuple(k for k in keys if self.scope.view.partition_of(k, n) in g.partitions)
        if g.address == self.node.endpoint:
            return self._local(Scope(self.scope.view, g.partitions, keys, self.scope.prefix,
                                     self.scope.tail), start)
        query = Changes(self.scope.view.name, keys, self.scope.prefix,
                        None if start is None else render(start), self.scope.tail)
        return upstream(g.address, self.mark, self.ssl, query, list(g.partitions),
                        self.node.partitions[self.scope.view.name], self.token)

    async def _local(self, scope: Scope, start: dict[int, int] | None
                     ) -> AsyncIterator[Event]:
        sub = await Subscription.open(self.node, scope, start)
        try:
            async for e in sub.events(HANG_S):
                yield e
        finally:
            sub.close()

    async def _pump(self, g: _Group) -> None:
        try:
            async for e in self._events(g):
                await self.queue.put((g, e))
                if e.kind == "end":
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # PeerError, a refusal: resumed elsewhere
            await self.queue.put((g, exc))
            return
        await self.queue.put((g, ConnectionResetError("the stream ended")))

    # -- the merged events --
    async def events(self, keepalive_s: float) -> AsyncGenerator[Event]:
        try:
            await self._start(list(self.scope.partitions))
            clock = asyncio.get_running_loop().time
            sent = clock()  # when the client was last sent something
            while True:
                # the upstreams' own keepalives are not the client's: they come more
                # often (every 1-3 s) and are dropped, so the client's are timed here
                idle = sent + keepalive_s - clock()
                if idle <= 0:
                    sent = clock()
                    yield Event(kind="keepalive")
                    continue
                try:
                    async with asyncio.timeout(idle):
                        g, x = await self.queue.get()
                except TimeoutError:
                    continue
                if self.tasks.get(g) is None:
                    continue  # a group already replaced
                if isinstance(x, Exception) or x.kind == "end":
                    await self._failover(g, x)
                    continue
                out = self._merge(g, x)
                if out is not None:
                    sent = clock()
                    yield out
                if x.kind == "ready" and not self.waiting and not self.readied:
                    self.announced = self.readied = True
                    sent = clock()
                    yield Event(kind="ready", id=render(self.cursor),
                                data=orjson.dumps({"position": render(self.cursor)}))
        finally:
            for t in self.tasks.values():
                t.cancel()
            for t in self.tasks.values():
                with contextlib.suppress(BaseException):
                    await t

    def _merge(self, g: _Group, e: Event) -> Event | None:
        if e.kind == "keepalive":
            return None
        if e.id is not None:
            self.cursor.update(parse(e.id, g.partitions, "id"))
        if e.kind == "ready":
            self.waiting -= set(g.partitions)
            return None
        return Event(data=e.data, kind=e.kind, at=e.at,
                     id=render(self.cursor) if self.announced and e.id is not None else None)

    async def _failover(self, g: _Group, why: Event | Exception) -> None:
        del self.tasks[g]
        if g.address != self.node.endpoint:
            self.failed.add(g.address)
        log.info("subscription to %s: %s partitions %s resume elsewhere (%s)", g.address,
                 self.scope.view.name, list(g.partitions),
                 why if isinstance(why, Exception) else why.data)
        await self._start(list(g.partitions))
