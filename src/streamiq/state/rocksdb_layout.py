"""The folders of a RocksDB store (``rocksdb.py``) as a start finds them.

``clean`` deletes what a stop left behind (databases marked dropped, folders half
received) and names each partition's database. ``migrate`` moves a store of the layout
before (one database for the view, rows ``b"d" + partition (2 bytes) + key``, the
checkpoint at ``b"m" + partition``) into a database per partition, row by row, once:
until the old database's ``CURRENT`` file is removed, which is done last, a start that
finds it does the move again from the beginning.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
import time
import uuid
from pathlib import Path

from rocksdict import Options, Rdict, ReadOptions, WriteBatch

__all__ = ["DROPPED", "INCOMING", "META", "ROW", "clean", "folder", "migrate"]

log = logging.getLogger("streamiq.state")

#: a partition database's keys: its rows, and its checkpoint entry
ROW, META = b"d", b"m"
#: a file marking a database dropped; the prefix of a folder still being received
DROPPED, INCOMING = "DROPPED", "incoming-"
_FOLDER = re.compile(r"^p(\d+)-[0-9a-f]+$")
_P = struct.Struct(">H")
_BATCH = 10_000


def folder(root: Path, partition: int, name: str | None = None) -> Path:
    """A new folder for ``partition``'s database (``name``: its id, else a new one)."""
    return root / f"p{partition}-{name or uuid.uuid4().hex[:12]}"


def clean(root: Path) -> dict[int, Path]:
    """Each partition's database folder; what is not one is deleted (a database marked
    dropped, a folder half received; of two for one partition, the older)."""
    found: dict[int, Path] = {}
    for sub in sorted(root.iterdir(), key=lambda f: f.stat().st_mtime):
        if not sub.is_dir():
            continue
        m = _FOLDER.match(sub.name)
        if m is None or (sub / DROPPED).exists():
            if m is not None or sub.name.startswith(INCOMING):
                shutil.rmtree(sub, ignore_errors=True)
            continue
        older = found.get(int(m.group(1)))
        if older is not None:
            shutil.rmtree(older, ignore_errors=True)
        found[int(m.group(1))] = sub
    return found


def migrate(root: Path, opts: Options) -> None:
    """Move a store of the layout before into a database per partition (no-op when
    there is none)."""
    if not (root / "CURRENT").exists():
        return
    t0 = time.monotonic()
    for sub in root.iterdir():  # a move cut short: started again
        if sub.is_dir() and _FOLDER.match(sub.name):
            shutil.rmtree(sub)
    old = Rdict(str(root), opts)
    rows = 0
    try:
        metas = [(k, v) for k, v in old.items(from_key=b"m")
                 if isinstance(k, bytes) and isinstance(v, bytes) and k.startswith(b"m")]
        for key, raw in metas:
            rows += _move(old, root, _P.unpack(key[1:3])[0], raw, opts)
    finally:
        old.close()
    (root / "CURRENT").unlink()
    for f in root.iterdir():
        if f.is_file():
            f.unlink()
    log.info("store %s moved to a database per partition: %d partitions, %d rows in %.1fs",
             root, len(metas), rows, time.monotonic() - t0)


def _move(old: Rdict, root: Path, p: int, raw: bytes, opts: Options) -> int:
    prefix = b"d" + _P.pack(p)
    bound = ReadOptions()
    bound.set_iterate_upper_bound(b"d" + _P.pack(p + 1))
    new = Rdict(str(folder(root, p)), opts)
    rows = 0
    try:
        wb = WriteBatch(raw_mode=True)
        for key, value in old.items(from_key=prefix, read_opt=bound):
            assert isinstance(key, bytes)  # raw mode
            wb.put(ROW + key[3:], value)
            rows += 1
            if not rows % _BATCH:
                new.write(wb)
                wb = WriteBatch(raw_mode=True)
        meta = {**json.loads(raw), "partition": p}
        wb.put(META, json.dumps(meta).encode())
        new.write(wb)
    finally:
        new.close()
    return rows
