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
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads_row"]

_BIG = float(2**63)


def loads_row(raw: bytes) -> Any:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
    return doc if _exact(doc) else json.loads(raw)


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
