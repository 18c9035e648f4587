"""Decoding stored rows: ``json.loads`` without its per-call Python layers.

``json.loads(raw)`` on a stored row (bytes, ~80 characters) spends most of its time in
Python before the C scanner runs: encoding detection, ``decode``, the decoder's
wrappers (5.2 us per row on this VM, against 1.3 us for the scanner itself). Folding
100k rows into an aggregate paid that per row. ``loads_row`` calls the C scanner
straight away and falls back to ``json.loads`` for anything it does not take whole
(leading or trailing whitespace, another encoding, invalid JSON), so it returns and
raises exactly what ``json.loads`` does. Every place that decodes a stored row (key
lookups through the full app, multi-get, scans, window fetches, aggregates) uses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["loads_row"]

# the C scanner (undeclared in typeshed); it clears its memo after each call
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads_row(raw: bytes) -> Any:
    try:
        text = raw.decode()
        doc, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, json.JSONDecodeError):
        return json.loads(raw)
    return doc if end == len(text) else json.loads(raw)
