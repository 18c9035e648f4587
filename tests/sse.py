"""A Server-Sent Events reader for tests: one streaming GET, events read one by one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["Sse", "SseEvent"]


@dataclass
class SseEvent:
    """One event (``comment`` set for a comment line such as ``: keepalive``)."""

    data: Any = None
    id: str | None = None
    event: str | None = None
    comment: str | None = None


class Sse:
    """``with Sse(url, params=..., headers=...) as s: s.next()``; a read waits at most
    ``timeout`` seconds (httpx's read timeout: a bound, not an assertion of speed)."""

    def __init__(self, url: str, timeout: float = 30, **kw: Any) -> None:
        self.client = httpx.Client(timeout=timeout)
        self._cm = self.client.stream("GET", url, **kw)
        self.response = self._cm.__enter__()
        self._lines: Iterator[str] = self.response.iter_lines()

    def __enter__(self) -> Sse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._cm.__exit__(None, None, None)
        self.client.close()

    def next(self) -> SseEvent:
        """The next event or comment."""
        e = SseEvent()
        data: list[str] = []
        for line in self._lines:
            if line == "":
                if data or e.event:
                    e.data = json.loads("\n".join(data)) if data else None
                    return e
                continue
            if line.startswith(":"):
                return SseEvent(comment=line[1:].strip())
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "id":
                e.id = value
            elif name == "event":
                e.event = value
        raise EOFError("the stream ended")

    def event(self) -> SseEvent:
        """The next event, comments skipped."""
        while True:
            e = self.next()
            if e.comment is None:
                return e
