"""How a consistent read moves its cut until every partition can be read at it.

The entry tries a cut; a replica that finds a key's records folded out of order around
it names a lower one (``CutMoved`` with ``lower``: its own partitions settled,
``History.settle``), and one whose versions no longer reach back names none (take a
new cut). Lowering is a cascade across nodes: excluding partition b's record on one
node can leave, on another, a record of a within the cut folded after b's, so the next
try lowers a, and so on back to a point every node's keys agree on. Each try lowers at
least one offset, so it ends there or below a floor (a new cut). ``at_one_cut`` runs
that loop for HTTP's gathers (``serving/query/gather.py``) and SQL's statements
(``serving/sql/execute.py``): lower cuts while the read has time, at most
``MAX_ROUNDS`` tries in all and ``MAX_NEW`` new cuts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from streamiq.errors import CutMoved, NotUpToBound
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.changelog.cuts import Cut, cut_of, lower

__all__ = ["MAX_NEW", "MAX_ROUNDS", "at_one_cut"]

T = TypeVar("T")

#: tries of one read in all, each at a cut lower or newer than the last (a CI run at
#: load 51 needed more than 6 lower ones: eight clients' transfers across three nodes)
MAX_ROUNDS = 32
#: new cuts one read takes (the versions kept no longer reached back to the last)
MAX_NEW = 6


async def at_one_cut(cut: Cut, attempt: Callable[[Cut], Awaitable[T]],
                     anew: Callable[[], Awaitable[Cut]], what: str, *,
                     deadline: float | None = None,
                     moved: Callable[[], None] | None = None,
                     served_by: str | None = None) -> tuple[T, Cut]:
    """``attempt(cut)``, again at a lower cut or a new one (``anew``) while one raises
    ``CutMoved``; the answer and the cut it was read at. ``NotUpToBound`` naming ``what``
    (the read's input) and the last reason past ``MAX_ROUNDS`` tries, ``MAX_NEW`` new
    cuts, or ``deadline`` (the event loop's time). ``moved`` counts each move;
    ``served_by`` goes into the refusal."""
    loop = asyncio.get_running_loop()
    why, news, tries = "", 1, 0
    while True:
        tries += 1
        try:
            return await attempt(cut), cut
        except CutMoved as exc:
            if moved is not None:
                moved()
            why = exc.message
            lowered = exc.extra.get("lower")
            out_of_time = deadline is not None and loop.time() >= deadline
            if tries >= MAX_ROUNDS or out_of_time or (
                    not isinstance(lowered, str) and news >= MAX_NEW):
                break
        if isinstance(lowered, str):
            cut = lower(cut, cut_of(parse_tokens(lowered)))
        else:
            news += 1
            cut = await anew()
    extra = {} if served_by is None else {"served_by": served_by}
    said = f"{tries} tries" if tries > 1 else "1 try"
    raise NotUpToBound(f"no cut of {what} held in {said} ({news} new); the last: "
                       f"{why}", **extra)
