"""The receiver's side of a partition snapshot: copy one partition from a peer into a
file (issue 49; the sender's side and the frames: ``serving/peer/snapshots.py``).

One connection of its own (a copy holds it for seconds, so not the pooled
``HopClient``'s): the preface and the cluster credential, one request of kind
``snapshot``, then (after a frame a second while the sender exports the partition) the
header, the file's parts as they come (written straight to ``into``) and the end. What
comes back is a ``Snapshot`` naming the file; nothing checks it here but its size: the
store that takes it in checks the rest (``Store.ingest``: digest, keys, checkpoint). A
peer that refuses (an error frame), closes the connection, sends more or fewer bytes
than its header said, or sends nothing for ``hang_s`` raises ``CopyFailed``, and the
partial file is removed: nothing half-copied is ever used.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from ssl import SSLContext
from typing import IO, Any

import orjson

from streamiq.errors import from_problem
from streamiq.serving.changelog.partition import Transfer
from streamiq.serving.cluster.wire import (
    END,
    HEADER,
    PART,
    PREFACE,
    PREPARING,
    REPLY,
    request_body,
    request_frame,
)
from streamiq.state import Checkpoint, Snapshot

__all__ = ["CopyFailed", "fetch_snapshot"]

_RID = 1
#: no frame for this long: the sender is taken for hung
HANG_S = 10.0


class CopyFailed(Exception):
    """A snapshot that did not arrive whole (the reason in the message)."""


class _Copy(asyncio.Protocol):
    def __init__(self, into: IO[bytes], transfer: Transfer) -> None:
        self.into = into
        self.transfer = transfer
        self.head: dict[str, Any] | None = None
        self.got = 0
        self.failed: Exception | None = None
        self.done = asyncio.get_running_loop().create_future()
        self.seen = asyncio.Event()
        self._buf = bytearray()

    def data_received(self, data: bytes) -> None:
        self.seen.set()
        buf = self._buf
        buf += data
        start = 0
        while len(buf) - start >= REPLY.size and not self.done.done():
            size, _, status = REPLY.unpack_from(buf, start)
            end = start + REPLY.size + size
            if len(buf) < end:
                break
            self._frame(status, memoryview(buf)[start + REPLY.size:end])
            start = end
        del buf[:start]

    def _frame(self, status: int, body: memoryview) -> None:
        if status == PREPARING and self.head is None:
            pass  # the sender is exporting the partition: alive (data_received saw it)
        elif status == PART and self.head is not None:
            self.into.write(body)
            self.got += len(body)
            self.transfer.got = self.got
            if self.got > int(self.head["size"]):
                self._end(CopyFailed(f"more than the {self.head['size']} bytes announced"))
        elif status == HEADER and self.head is None:
            try:
                head = orjson.loads(body)
                self.transfer.size = int(head["size"])
                self.head = head
            except (ValueError, KeyError, TypeError) as exc:
                self._end(CopyFailed(f"a header that is not one: {exc!r}"[:200]))
        elif status == END and self.head is not None:
            self._end(None)
        else:
            self._end(from_problem(status, bytes(body)) if status >= 400 else
                      CopyFailed(f"a frame of status {status} out of turn"))

    def _end(self, failed: Exception | None) -> None:
        if not self.done.done():
            self.failed = failed
            self.done.set_result(None)
        self.seen.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(CopyFailed("the sender closed the connection" + (
            f": {exc}" if exc else "")))


async def fetch_snapshot(address: str, mark: str, ssl: SSLContext | None, view: str,
                         partition: int, count: int, into: Path,
                         hang_s: float = HANG_S, transfer: Transfer | None = None
                         ) -> Snapshot:
    """Copy ``view``'s ``partition`` (of ``count``) from the node at ``address`` into
    the file ``into``; ``CopyFailed`` (or the peer's error, e.g. ``NotActive``) when it
    does not arrive whole, the file then removed. ``transfer``: kept up to date with
    what has come."""
    transfer = transfer or Transfer(address)
    name, _, port = address.rpartition(":")
    loop = asyncio.get_running_loop()
    with open(into, "wb") as f:
        try:
            try:
                async with asyncio.timeout(hang_s):
                    transport, proto = await loop.create_connection(
                        lambda: _Copy(f, transfer), name, int(port), ssl=ssl,
                        server_hostname=name if ssl else None)
            except (OSError, TimeoutError) as exc:
                raise CopyFailed(f"{address} unreachable: {exc!r}") from exc
            copy = proto
            try:
                body = request_body("snapshot", {"view": view}, [partition], count, None)
                transport.write(PREFACE + mark.encode() + b"\n" + request_frame(_RID, 0, body))
                while not copy.done.done():
                    copy.seen.clear()
                    try:
                        async with asyncio.timeout(hang_s):
                            await copy.seen.wait()  # bytes came, or the copy ended
                    except TimeoutError:
                        raise CopyFailed(f"{address} sent nothing for {hang_s} s") from None
            finally:
                transport.close()
            if copy.failed is not None:
                raise copy.failed
            return _snapshot(copy, into)
        except BaseException:
            into.unlink(missing_ok=True)
            raise


def _snapshot(copy: _Copy, into: Path) -> Snapshot:
    head = copy.head
    assert head is not None
    copy.into.flush()
    if copy.got != int(head["size"]):
        raise CopyFailed(f"{copy.got} bytes of the {head['size']} announced")
    try:
        cp = head["checkpoint"]
        position = {str(t): {int(p): int(o) for p, o in po.items()}
                    for t, po in cp["position"].items()}
        return Snapshot(str(head["format"]), int(head["partition"]), into,
                        Checkpoint(offset=int(cp["offset"]), position=position),
                        int(head["rows"]), int(head["size"]), str(head["sha256"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CopyFailed(f"a header that is not one: {exc!r}"[:200]) from None
