"""Decoding stored rows with orjson (a C-core JSON library), answering as ``json.loads``.

Every place that decodes a stored row (key lookups through the full app, multi-get,
scans, window fetches, aggregates) calls ``loads_row``. It returns and raises exactly
what ``json.loads`` does: orjson decodes the rows Spark's ``to_json`` writes (UTF-8, no
NaN or Infinity), and whatever orjson does not take goes to ``json.loads``, which then
returns its value or raises its own error:

- ``NaN``/``Infinity`` literals, which orjson rejects and ``json.loads`` accepts: Spark
  never writes them, and a row that has them still decodes as before (slow path);
- UTF-16/32 input, lone surrogate escapes, numbers beyond a double's range;
- invalid JSON: the error (a ``ValueError``) and its message stay ``json.loads``'s.

orjson answers one thing differently: an integer outside 64 bits (a Spark
``decimal(38,0)``, say) becomes a float, where ``json.loads`` keeps it an int. Such a
float is at least 2**63 in magnitude, so a decoded row holding a float that large (a
rare value) is decoded again by ``json.loads``.

``loads_rows`` decodes many rows (JSON objects, as the changelog's are) in one orjson
call over ``[row,row,...]``: a call per row cost as much as the decoding. It answers as
``loads_row`` on each, or on the values of the ``columns`` asked (an aggregate's: the
rest of a row may hold orjson's float for a large integer). A batch that orjson does
not take, that does not decode to one object per row (a stored value that is not one
JSON object), or where a value asked may be inexact, is decoded row by row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["loads_row", "loads_rows"]

_BIG = float(2**63)


def loads_row(raw: bytes) -> Any:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
    return doc if _exact(doc) else json.loads(raw)


def loads_rows(raws: Sequence[bytes], columns: Sequence[str] | None = None) -> list[Any]:
    """``[loads_row(r) for r in raws]`` (exact in ``columns`` only, when given), in one
    orjson call where it may."""
    try:
        docs = orjson.loads(b"[" + b",".join(raws) + b"]")
    except orjson.JSONDecodeError:
        docs = None
    if (docs is not None and len(docs) == len(raws) and set(map(type, docs)) <= {dict}
            and (_exact(docs) if columns is None else _exact_in(docs, columns))):
        return list(docs)
    return [loads_row(r) for r in raws]


def _exact_in(docs: list[dict[str, Any]], columns: Sequence[str]) -> bool:
    """``_exact`` for the values of ``columns`` only (floats' range, containers whole)."""
    for c in columns:
        odd = [v for d in docs if (t := type(v := d.get(c))) is float or t is list or t is dict]
        if odd and not _exact(odd):
            return False
    return True


def _exact(doc: Any) -> bool:
    """No float in ``doc`` that may be an integer orjson widened past 64 bits."""
    t = type(doc)
    if t is float:
        return bool(-_BIG < doc < _BIG)
    if t is dict:
        values = doc.values()
    elif t is list:
        values = doc
    else:
        return True
    for v in values:
        t = type(v)
        if t is float:
            if not -_BIG < v < _BIG:
                return False
        elif (t is dict or t is list) and not _exact(v):
            return False
    return True
