"""Key-ordered scans: per-partition reads, cross-partition merge and resume cursors.

A store key is the view key's UTF-8 bytes (plus ``\\x00`` and the big-endian window
start for windowed views), so byte order of store keys is key order, then window
order. Each partition returns at most ``limit`` rows of the range; the coordinating
node merges them and keeps the first ``limit``, which is exact because no partition
can contribute a row beyond its own ``limit``-th. The cursor is the last returned
store key; a resumed scan starts strictly after it.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamiq.serving.engines._json import loads_row
from streamiq.serving.engines.partials import ScannedRow, ScanPartial
from streamiq.state.base import Reader
from streamiq.views.base import View, store_key

__all__ = [
    "MAX_LIMIT", "KeyRange", "cursor_cut", "decode_cursor", "encode_cursor", "merge_rows",
    "row_sort_key", "scan_partitions",
]

MAX_LIMIT = 1000
_WSTART = struct.Struct(">q")


@dataclass(frozen=True)
class KeyRange:
    """[lo, hi) over store keys; None is unbounded. Windows filtered to [wfrom, wto)."""

    lo: bytes | None = None
    hi: bytes | None = None
    wfrom: int | None = None
    wto: int | None = None

    @classmethod
    def build(cls, start: str | None = None, end: str | None = None, prefix: str | None = None,
              after: bytes | None = None, wfrom: int | None = None, wto: int | None = None
              ) -> KeyRange:
        bounds_lo = [b for b in (start.encode() if start else None,
                                 prefix.encode() if prefix else None,
                                 after + b"\x00" if after is not None else None) if b is not None]
        bounds_hi = [b for b in (end.encode() if end else None,
                                 _prefix_end(prefix.encode()) if prefix else None)
                     if b is not None]
        return cls(max(bounds_lo) if bounds_lo else None,
                   min(bounds_hi) if bounds_hi else None, wfrom, wto)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def encode_cursor(view: str, last: bytes, cut: str | None = None) -> str:
    """A page's cursor: the view, the store key it resumes after and, for a consistent
    scan, the cut its every page reads (a position token)."""
    doc: dict[str, str] = {"v": view, "after": last.hex()}
    if cut is not None:
        doc["cut"] = cut
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_doc(view: str, cursor: str) -> dict[str, Any]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        bytes.fromhex(doc["after"])
        owner = doc["v"]
        if not isinstance(doc.get("cut", ""), str):
            raise TypeError("cut")
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"cursor: not a cursor returned by this API ({cursor[:40]!r})") from exc
    if owner != view:
        raise ValueError(f"cursor: belongs to view {owner!r}, not {view!r}")
    return dict(doc)


def decode_cursor(view: str, cursor: str) -> bytes:
    """The store key a cursor resumes after; ValueError (a 400) if it is not ours."""
    return bytes.fromhex(_cursor_doc(view, cursor)["after"])


def cursor_cut(view: str, cursor: str) -> str | None:
    """The cut a consistent scan's cursor carries (None: a plain scan's)."""
    cut = _cursor_doc(view, cursor).get("cut")
    return cut if isinstance(cut, str) else None


def _row(view: View, partition: int, sk: bytes, raw: bytes) -> ScannedRow:
    key = (sk[:-9] if view.windowed else sk).decode(errors="replace")  # checked when stored
    return {"key": key, "partition": partition, "value": loads_row(raw)}


def scan_partitions(view: View, store: Reader, partitions: Iterable[int], rng: KeyRange,
                    limit: int) -> ScanPartial:
    """Up to ``limit`` rows of the range from each partition (a scatter-gather partial)."""
    rows: list[ScannedRow] = []
    more = False
    windowed = view.windowed and (rng.wfrom is not None or rng.wto is not None)
    wfrom = rng.wfrom if rng.wfrom is not None else -(1 << 63)
    wto = rng.wto if rng.wto is not None else (1 << 63) - 1
    if not rng.empty:
        for p in partitions:
            n = 0
            for sk, raw in store.scan(p, rng.lo, rng.hi):
                if windowed and not wfrom <= _WSTART.unpack_from(sk, len(sk) - 8)[0] < wto:
                    continue
                if n == limit:
                    more = True
                    break
                rows.append(_row(view, p, sk, raw))
                n += 1
    return {"rows": rows, "more": more}


def row_sort_key(view: View, row: ScannedRow) -> bytes:
    if view.windowed:
        return store_key(row["key"], int(row["value"]["window_start"]))
    return store_key(row["key"])


def merge_rows(view: View, partials: Sequence[ScanPartial], limit: int
               ) -> tuple[list[ScannedRow], str | None]:
    """The first ``limit`` rows across partials in key order, and the next cursor."""
    keyed = [(row_sort_key(view, r), r) for part in partials for r in part["rows"]]
    keyed.sort(key=lambda kr: kr[0])
    more = len(keyed) > limit or any(part["more"] for part in partials)
    page = keyed[:limit]
    cursor = encode_cursor(view.name, page[-1][0]) if more and page else None
    return [r for _, r in page], cursor
