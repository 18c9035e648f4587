"""Waiting for something in an asyncio test: for that thing, never for a while."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["until"]


async def until(cond: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Poll ``cond`` while the loop runs until it is true; fail naming ``what`` after
    ``timeout`` seconds (a hang guard, never a timing: nothing asserts how long it took)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.002)
