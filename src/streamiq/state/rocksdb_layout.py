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

__all__ = ["clean", "migrate"]

log = logging.getLogger("streamiq.state")

_FOLDER = re.compile(r"^p(\d+)-[0-9a-f]+$")
_P = struct.Struct(">H")
_BATCH = 10_000


def clean(root: Path) -> dict[int, Path]:
    """Each partition's database folder; what is not one is deleted (a database marked
    dropped, a folder half received; of two for one partition, the older)."""
    found: dict[int, Path] = {}
    for folder in sorted(root.iterdir(), key=lambda f: f.stat().st_mtime):
        if not folder.is_dir():
            continue
        m = _FOLDER.match(folder.name)
        if m is None or (folder / "DROPPED").exists():
            if m is not None or folder.name.startswith("incoming-"):
                shutil.rmtree(folder, ignore_errors=True)
            continue
        older = found.get(int(m.group(1)))
        if older is not None:
            shutil.rmtree(older, ignore_errors=True)
        found[int(m.group(1))] = folder
    return found


def migrate(root: Path, opts: Options) -> None:
    """Move a store of the layout before into a database per partition (no-op when
    there is none)."""
    if not (root / "CURRENT").exists():
        return
    t0 = time.monotonic()
    for folder in root.iterdir():  # a move cut short: started again
        if folder.is_dir() and _FOLDER.match(folder.name):
            shutil.rmtree(folder)
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
    new = Rdict(str(root / f"p{p}-{uuid.uuid4().hex[:12]}"), opts)
    rows = 0
    try:
        wb = WriteBatch(raw_mode=True)
        for key, value in old.items(from_key=prefix, read_opt=bound):
            assert isinstance(key, bytes)  # raw mode
            wb.put(b"d" + key[3:], value)
            rows += 1
            if not rows % _BATCH:
                new.write(wb)
                wb = WriteBatch(raw_mode=True)
        meta = {**json.loads(raw), "partition": p}
        wb.put(b"m", json.dumps(meta).encode())
        new.write(wb)
    finally:
        new.close()
    return rows
