"""The lean write path's checks: a request's parts to the record it produces, or None.

None never means "refused": it means "not taken here", and the full FastAPI route
(``ingest/app.py``) answers the request, refusals included, with their wording
(``amount: Input should be ...``). So each function takes only requests that are plainly
valid, a subset of what the full route accepts, and builds the record the route would
build from them, key order included (``tests/unit/ingest/test_lean_parity.py`` sends
the same requests to both):

* a key matches ``ID_PATTERN`` (the whole string: ``re.fullmatch``, no trailing newline);
* a bank amount is a plain decimal integer (``-?`` and no leading zero) within
  ``AMOUNT``; a query string holds each parameter once and nothing else;
* an order is a JSON object of exactly its four fields (none twice), its ids strings,
  its type one of the two, its amount a JSON number (not ``true``: Python's ``bool`` is
  an ``int``), finite, within ``ORDER_AMOUNT``, produced as a float as the route's model
  does (``strict=True`` keeps ``"12"`` out there too).
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from streamiq.views.base import ID_PATTERN
from streamiq.views.limits import AMOUNT, ORDER_AMOUNT

__all__ = ["Record", "deposit", "order", "transfer"]

#: (the record's key, the record): what a route produces
Record = tuple[str, dict[str, Any]]

_ID = re.compile(ID_PATTERN.removeprefix("^").removesuffix("$"))
_AMOUNT = re.compile(rb"-?(?:0|[1-9][0-9]{0,12})")
_ORDER_FIELDS = ("order_id", "store", "type", "amount")
_ORDER_TYPES = ("GENERAL", "RESTAURANT")
_TRANSFER = (b"from", b"to", b"amount")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _amount(raw: bytes) -> int | None:
    if _AMOUNT.fullmatch(raw) is None:
        return None
    amount = int(raw)
    return amount if AMOUNT.contains(amount) else None


def deposit(account: str, query: bytes) -> Record | None:
    """``POST /account/{account}?amount=N``."""
    name, _, raw = query.partition(b"=")
    if name != b"amount" or _ID.fullmatch(account) is None:
        return None
    amount = _amount(raw)
    if amount is None:
        return None
    return account, {"account": account, "amount": amount, "ts": _now_ms()}


def transfer(query: bytes) -> Record | None:
    """``POST /transfer?from=A&to=B&amount=N`` (the parameters in any order)."""
    params: dict[bytes, bytes] = {}
    for part in query.split(b"&"):
        name, eq, value = part.partition(b"=")
        if not eq or name not in _TRANSFER or name in params:
            return None
        params[name] = value
    if len(params) != len(_TRANSFER):
        return None
    source, to = params[b"from"].decode("latin-1"), params[b"to"].decode("latin-1")
    amount = _amount(params[b"amount"])
    if (amount is None or source == to or _ID.fullmatch(source) is None
            or _ID.fullmatch(to) is None):
        return None
    return source, {"account": source, "to": to, "amount": amount, "ts": _now_ms()}


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any] | None:
    """A JSON object with no field twice (else None, which the order check declines)."""
    out = dict(pairs)
    return out if len(out) == len(pairs) else None


def order(body: bytes) -> Record | None:
    """``POST /orders`` with a JSON body."""
    try:
        got = json.loads(body, object_pairs_hook=_pairs)
    except ValueError:
        return None
    if type(got) is not dict or len(got) != len(_ORDER_FIELDS):
        return None
    order_id, store = got.get("order_id"), got.get("store")
    kind, amount = got.get("type"), got.get("amount")
    if (type(order_id) is not str or _ID.fullmatch(order_id) is None
            or type(store) is not str or _ID.fullmatch(store) is None
            or kind not in _ORDER_TYPES or type(amount) not in (int, float)):
        return None
    assert isinstance(amount, int | float)  # as checked (bool, an int, is not taken)
    if not ORDER_AMOUNT.contains(amount) or not math.isfinite(amount):
        return None
    return store, {"order_id": order_id, "store": store, "type": kind,
                   "amount": float(amount), "ts": _now_ms()}
