"""Partition snapshots: one partition of a store, copied whole into a file that another
store of the same kind takes in (issue 49: a replica bootstraps from a peer's copy
instead of replaying the changelog).

A ``Snapshot`` (``state/base.py``, beside the ``Store`` protocol) names the file and
what it holds: the partition, the checkpoint its rows reflect (the changelog offset to
follow on from), the row count, its size and SHA-256.
``Store.export`` writes one, consistent as of one moment; ``Store.ingest`` checks it
(format, digest, every key inside the partition, the checkpoint it carries) and only
then replaces the partition with it, so a store never holds a half-taken snapshot. A
snapshot that fails a check raises ``SnapshotError`` and leaves the partition as it was.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from streamiq.state.base import Snapshot, SnapshotError

__all__ = ["Snapshot", "SnapshotError", "check_digest", "file_digest"]


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_digest(snapshot: Snapshot, expected_format: str) -> None:
    """``SnapshotError`` unless the file is of ``expected_format``, whole and unchanged."""
    if snapshot.format != expected_format:
        raise SnapshotError(f"a {snapshot.format!r} snapshot; this store takes "
                            f"{expected_format!r}")
    try:
        size = snapshot.path.stat().st_size
    except OSError as exc:
        raise SnapshotError(f"snapshot file unreadable: {exc}") from None
    if size != snapshot.size:
        raise SnapshotError(f"snapshot file is {size} bytes, not {snapshot.size}: cut short")
    if file_digest(snapshot.path) != snapshot.sha256:
        raise SnapshotError("snapshot file does not match its SHA-256")
