"""The sender's side of a partition snapshot (issue 49): one request of kind
``snapshot``, answered by a stream of reply frames under its request id.

The request's query is ``{"view"}`` and ``p`` the one partition; ``n`` the partition
count the asking node uses (another is refused, 421, as every peer request). The node
must hold the partition, restored (else 421: ask another replica). It exports the
partition from its store to a file under its state directory (``Store.export``: one
consistent moment, in a worker thread), then sends:

    202  (none or more, no body) still exporting: one every second
    200  the header: {"format", "partition", "checkpoint": {"offset", "position"},
         "rows", "size", "sha256"} (``Snapshot``'s fields but its path)
    206  the file's bytes, in chunks of ``CHUNK`` at most (as many frames as it takes)
    204  the end (no body)

or, at any point, one error frame (a problem document), after which nothing follows.
Sending is paced at ``rate`` bytes a second and stops while the receiver reads nothing
(the transport's buffer past ``HIGH_WATER``), so a copy never takes more than its share
of the sender's network and memory; the file is removed once sent or abandoned. Only a
peer that showed the cluster credential reaches this (``PeerConnection``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from streamiq.errors import BadRequest, NotActive
from streamiq.serving.cluster.wire import END, HEADER, PART, PREPARING, reply_frame
from streamiq.serving.peer.failures import failure
from streamiq.serving.query.run import Queries
from streamiq.state import Snapshot

__all__ = ["CHUNK", "END", "HEADER", "HIGH_WATER", "PART", "PREPARING", "header",
           "serve_snapshot"]

log = logging.getLogger("streamiq.routing")

CHUNK = 1 << 20
#: bytes waiting unsent past which the sender waits for the receiver
HIGH_WATER = 4 * CHUNK
#: while the partition is being exported (seconds for millions of rows), a PREPARING
#: frame with no body every this many seconds: the receiver does not take the sender
#: for hung (its bound is ``copy.HANG_S``)
PREPARING_S = 1.0

Write = Callable[[bytes], None]
Waiting = Callable[[], int]


def header(snap: Snapshot) -> bytes:
    return orjson.dumps(snap.described(), option=orjson.OPT_NON_STR_KEYS)


def _asked(queries: Queries, doc: Any) -> tuple[str, int]:
    try:
        view, (p,), count = str(doc["q"]["view"]), doc["p"], int(doc["n"])
        if type(p) is not int:
            raise TypeError(p)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BadRequest("malformed snapshot request") from None
    node = queries.node
    held = node.materializer.holding().get((view, p))
    if node.partitions.get(view) != count or held is None or not held.restored:
        raise NotActive(f"{node.endpoint} holds no restored copy of {view} partition {p}",
                        partition=p)
    return view, p


async def serve_snapshot(queries: Queries, rid: int, doc: Any, write: Write,
                         waiting: Waiting, rate: float, scratch: Path) -> None:
    """Export the partition asked and stream it, paced at ``rate`` bytes a second."""
    path = scratch / f"snapshot-{uuid.uuid4().hex}"
    try:
        view, p = _asked(queries, doc)
        scratch.mkdir(parents=True, exist_ok=True)
        export = asyncio.ensure_future(asyncio.to_thread(queries.node.stores[view].export,
                                                         p, path))
        while not (await asyncio.wait({export}, timeout=PREPARING_S))[0]:
            if waiting() >= 0:
                write(reply_frame(rid, PREPARING, b""))
        snap = export.result()
        if waiting() < 0:
            return  # the receiver went away while it was exported
        if snap is None:
            raise NotActive(f"{queries.node.endpoint} holds no {view} partition {p}",
                            partition=p)
        write(reply_frame(rid, HEADER, header(snap)))
        if not await _send(path, rid, write, waiting, rate):
            return  # the receiver went away
        write(reply_frame(rid, END, b""))
        log.info("sent %s partition %d: %d rows, %d bytes", view, p, snap.rows, snap.size)
    except Exception as exc:
        write(failure(rid, exc, "peer snapshot"))
    finally:
        path.unlink(missing_ok=True)


async def _send(path: Path, rid: int, write: Write, waiting: Waiting, rate: float) -> bool:
    """The file in chunks, paced; False if the connection closed first."""
    start, sent = time.monotonic(), 0
    size = max(4096, min(CHUNK, int(rate / 20)))  # a twentieth of a second's worth at most
    with open(path, "rb") as f:
        while chunk := f.read(size):
            write(reply_frame(rid, PART, chunk))
            sent += len(chunk)
            ahead = sent / rate - (time.monotonic() - start)  # seconds ahead of the pace
            if ahead > 0:
                await asyncio.sleep(ahead)
            unsent = waiting()
            while unsent > HIGH_WATER:
                await asyncio.sleep(0.01)
                unsent = waiting()
            if unsent < 0:
                return False
    return True
