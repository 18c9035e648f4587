"""An aggregate's result each time it changes (issue 40):
``GET /v1/views/{view}/aggregate/changes``.

The view's changes from now on (a ``Merge`` of the owners' streams with ``tail``: no
first rows) only say *when* to look again: the aggregate is then asked again through the
query layer (the same scatter-gather as ``/aggregate``) at most once per ``interval``,
and its result sent when it differs from the last one sent. One more ask follows
``SETTLE_S`` after the last change, so a result gathered from a replica a little behind
the one that told of the change is corrected: the stream ends at the exact totals.
Results carry no id: a client that reconnects gets the current result first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable

import orjson

from streamiq.serving.changes.merge import Merge
from streamiq.serving.changes.stream import Event

__all__ = ["SETTLE_S", "AggregateChanges"]

#: after the last change, the aggregate is asked once more this much later
SETTLE_S = 0.5


class AggregateChanges:
    """``ask()`` the aggregate's rendered result (JSON) whenever ``trigger`` tells of a
    change, at most once per ``interval_s``; ``first`` is the result already asked."""

    def __init__(self, trigger: Merge, ask: Callable[[], Awaitable[bytes]], first: bytes,
                 interval_s: float) -> None:
        self.trigger = trigger
        self.ask = ask
        self.first = first
        self.interval_s = interval_s
        self.changed = asyncio.Event()
        self.ended: str | None = None

    async def _watch(self, keepalive_s: float) -> None:
        try:
            async for e in self.trigger.events(keepalive_s):
                if e.kind is None:
                    self.changed.set()
                elif e.kind == "end":
                    break
        except Exception as exc:  # no replica found: the stream ends, saying why
            self.ended = str(exc)
        else:
            self.ended = "the view's changes ended"
        self.changed.set()

    async def events(self, keepalive_s: float) -> AsyncGenerator[Event]:
        loop = asyncio.get_running_loop()
        watch = loop.create_task(self._watch(keepalive_s))
        last, ran, settle = self.first, loop.time(), False
        try:
            yield Event(data=last)
            while True:
                try:
                    async with asyncio.timeout(SETTLE_S if settle else keepalive_s):
                        await self.changed.wait()
                except TimeoutError:
                    if not settle:
                        yield Event(kind="keepalive")
                        continue
                if self.ended is not None:
                    yield Event(kind="end", data=orjson.dumps({"reason": self.ended}))
                    return
                settle = self.changed.is_set()  # a change: look once more after it
                await asyncio.sleep(max(0.0, ran + self.interval_s - loop.time()))
                self.changed.clear()
                ran = loop.time()
                body = await self.ask()
                if body != last:
                    last = body
                    yield Event(data=body)
        finally:
            watch.cancel()
            with contextlib.suppress(BaseException):
                await watch
