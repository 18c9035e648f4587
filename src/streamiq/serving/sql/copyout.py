"""``COPY (query) TO STDOUT`` and ``COPY view TO STDOUT``: a query's rows in COPY's text
or CSV format (asyncpg's ``copy_from_query`` and ``copy_from_table``, psql's ``\\copy``).
COPY into a view is refused: the views are read-only.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from streamiq.errors import BadSql
from streamiq.serving.sql.codecs import row_encoder

__all__ = ["CopyOut", "copy_statement"]

_COPY = re.compile(
    r"^\s*COPY\s+(?:\((?P<query>.*)\)|(?P<table>[\w.\"]+)\s*(?:\((?P<cols>[^)]*)\))?)\s+"
    r"TO\s+STDOUT\s*(?:WITH\s*)?(?P<opts>.*?)\s*;?\s*$", re.I | re.S)
_OPTION = re.compile(r"(\w+)(?:\s+('(?:[^']|'')*'|\w+))?")
_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@dataclass(frozen=True)
class CopyOut:
    """What to copy (``query``) and how: ``csv`` or text, a header line, the delimiter,
    the text NULLs are written as."""

    query: str
    csv: bool = False
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"

    def lines(self, names: Sequence[str], types: Sequence[str],
              rows: Sequence[Sequence[Any]]) -> Iterator[bytes]:
        """Each row as one line (``CopyData``) in this format."""
        encoder = row_encoder(types, [])
        if self.csv:
            out = io.StringIO()
            writer = csv.writer(out, delimiter=self.delimiter, lineterminator="\n")
            if self.header:
                writer.writerow(names)
            for row in rows:
                writer.writerow(["" if v is None else bytes(v).decode()
                                 for v in encoder.encode(row)])
                yield out.getvalue().encode()
                out.seek(0)
                out.truncate()
            return
        if self.header:
            yield (self.delimiter.join(names) + "\n").encode()
        for row in rows:
            yield (self.delimiter.join(self.null if v is None else bytes(v).decode().translate(
                _TEXT_ESCAPES) for v in encoder.encode(row)) + "\n").encode()


def _unquote(value: str | None) -> str:
    return (value or "").strip("'").replace("''", "'")


def _options(text: str) -> dict[str, str]:
    """``(FORMAT csv, HEADER, DELIMITER ',')`` or the old ``CSV HEADER`` form."""
    found: dict[str, str] = {}
    for name, value in _OPTION.findall(text.strip().strip("()").replace(",", " ")):
        key = name.lower()
        if key in ("csv", "binary", "text"):
            found["format"] = key
        else:
            found[key] = _unquote(value) if value else "true"
    return found


def copy_statement(sql: str) -> CopyOut | None:
    """``sql`` when it is a COPY: what to copy out, or BadSql for one we do not answer
    (COPY FROM, binary, to a file); None when it is not a COPY."""
    if not re.match(r"^\s*COPY\b", sql, re.I):
        return None
    m = _COPY.match(sql)
    if m is None:
        raise BadSql("only COPY ... TO STDOUT is answered here (the views are read-only): "
                     "COPY (query) TO STDOUT [WITH (FORMAT csv, HEADER)]")
    opts = _options(m.group("opts"))
    kind = opts.get("format", "text").lower()
    if kind not in ("text", "csv"):
        raise BadSql(f"COPY format {kind} is not supported here: text or csv")
    query = m.group("query") or f"SELECT {m.group('cols') or '*'} FROM {m.group('table')}"
    is_csv = kind == "csv"
    return CopyOut(query, is_csv, opts.get("header", "false").lower() in ("true", "on", "1"),
                   opts.get("delimiter", "," if is_csv else "\t"),
                   opts.get("null", "" if is_csv else "\\N"))
