"""The receiver's side of a partition snapshot: copy one partition from a peer into a
file (issue 49; the sender's side and the frames: ``serving/peer/snapshots.py``).

A peer stream (``stream.py``: a connection of its own, as a copy holds it for seconds;
its receive buffer not capped, as a bulk copy's must not be): one request of kind
``snapshot``, then (after a frame a second while the sender exports the partition) the
header, the file's parts as they come (written to ``into``) and the end. What
comes back is a ``Snapshot`` naming the file; nothing checks it here but its size: the
store that takes it in checks the rest (``Store.ingest``: digest, keys, checkpoint). A
peer that refuses (an error frame), closes the connection, sends more or fewer bytes
than its header said, or sends nothing for ``hang_s`` raises ``CopyFailed``, and the
partial file is removed: nothing half-copied is ever used.
"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from ssl import SSLContext
from typing import IO

import orjson

from streamiq.errors import PeerTimeout, PeerUnreachable, from_problem
from streamiq.serving.changelog.partition import Transfer
from streamiq.serving.cluster.stream import stream
from streamiq.serving.cluster.wire import END, HEADER, PART, PREPARING, request_body
from streamiq.state import Snapshot, SnapshotError

__all__ = ["CopyFailed", "fetch_snapshot"]

#: no frame for this long: the sender is taken for hung
HANG_S = 10.0


class CopyFailed(Exception):
    """A snapshot that did not arrive whole (the reason in the message)."""


class _Copy:
    """What has come of one copy: the header (the snapshot it describes), then the
    file's bytes (to ``into``, at ``path``)."""

    def __init__(self, into: IO[bytes], path: Path, transfer: Transfer) -> None:
        self.into = into
        self.path = path
        self.transfer = transfer
        self.head: Snapshot | None = None
        self.got = 0

    def frame(self, status: int, body: bytes) -> bool:
        """Take one frame; True at the end."""
        if status == PREPARING and self.head is None:
            return False  # the sender is exporting the partition: alive
        if status == PART and self.head is not None:
            self.into.write(body)
            self.got += len(body)
            self.transfer.got = self.got
            if self.got > self.head.size:
                raise CopyFailed(f"more than the {self.head.size} bytes announced")
            return False
        if status == HEADER and self.head is None:
            try:
                self.head = Snapshot.of(orjson.loads(body), self.path)
            except (ValueError, SnapshotError) as exc:  # orjson's: a ValueError
                raise CopyFailed(f"a header that is not one: {exc}"[:200]) from None
            self.transfer.size = self.head.size
            return False
        if status == END and self.head is not None:
            return True
        if status >= 400:
            raise from_problem(status, body)
        raise CopyFailed(f"a frame of status {status} out of turn")

    def snapshot(self) -> Snapshot:
        """The file, whole as its header said (``CopyFailed`` if not)."""
        assert self.head is not None
        self.into.flush()
        if self.got != self.head.size:
            raise CopyFailed(f"{self.got} bytes of the {self.head.size} announced")
        return self.head


async def fetch_snapshot(address: str, mark: str, ssl: SSLContext | None, view: str,
                         partition: int, count: int, into: Path,
                         hang_s: float = HANG_S, transfer: Transfer | None = None
                         ) -> Snapshot:
    """Copy ``view``'s ``partition`` (of ``count``) from the node at ``address`` into
    the file ``into``; ``CopyFailed`` (or the peer's error, e.g. ``NotActive``) when it
    does not arrive whole, the file then removed. ``transfer``: kept up to date with
    what has come."""
    body = request_body("snapshot", {"view": view}, [partition], count, None)
    with open(into, "wb") as f:
        copy = _Copy(f, into, transfer or Transfer(address))
        try:
            try:
                async with aclosing(stream(address, mark, ssl, body, hang_s,
                                           receive_buffer=None)) as frames:
                    async for status, frame in frames:
                        if copy.frame(status, frame):
                            break
                    else:
                        raise CopyFailed("the sender closed the connection")
            except PeerTimeout:
                raise CopyFailed(f"{address} sent nothing for {hang_s} s") from None
            except PeerUnreachable as exc:  # not connected, or the connection lost
                what = ("closed the connection" if isinstance(exc.cause, ConnectionResetError)
                        else "unreachable")
                raise CopyFailed(f"{address} {what}: {exc.cause!r}") from None
            return copy.snapshot()
        except BaseException:
            into.unlink(missing_ok=True)
            raise
