"""Records a part reads from a Kafka topic and does not use: checked, skipped, counted.

Nodes read topics anyone with write access can fill (the catalog, the members topics,
the pipeline's progress). Every record is decoded with :func:`load_object` (any bytes,
any size, any nesting: it raises :class:`Skip`, never anything else; no NaN or
Infinity, nothing nested past ``MAX_DEPTH``: what is kept can be answered as JSON),
and a record that does not fit is counted in a :class:`Skips` under a *reason* (the
``reason`` label of ``streamiq_topic_records_skipped``), logged at most at the 1st,
2nd, 4th, 8th... skip, and the part carries on.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

__all__ = ["MAX_DEPTH", "Skip", "Skips", "load_object"]

#: records nested deeper than this are skipped (none of these topics nests past 4)
MAX_DEPTH = 16


class Skip(ValueError):
    """A record that is not used; ``reason`` says why in a word (a metric label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _deeper(doc: Any, limit: int) -> bool:
    """Whether arrays/objects nest in ``doc`` more than ``limit`` deep (level by level:
    no recursion)."""
    level = [doc]
    for _ in range(limit):
        level = [x for v in level if isinstance(v, (dict, list))
                 for x in (v.values() if isinstance(v, dict) else v)]
    return any(isinstance(v, (dict, list)) for v in level)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_object(raw: Any, max_bytes: int) -> dict[str, Any]:
    """One JSON object from a record's value: Skip ``too_large``, ``not_json`` (None,
    not bytes, invalid UTF-8 or JSON, NaN or Infinity, nested too deep for the parser),
    ``too_deep`` or ``not_object``."""
    if not isinstance(raw, (bytes, bytearray, memoryview, str)):
        raise Skip("not_json", f"a {type(raw).__name__}, not bytes")
    if len(raw) > max_bytes:
        raise Skip("too_large", f"{len(raw)} bytes (limit {max_bytes})")
    try:
        doc = json.loads(bytes(raw) if isinstance(raw, memoryview) else raw,
                         parse_constant=_constant)
    except RecursionError:
        raise Skip("not_json", "nested too deep") from None
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise Skip("not_json", str(exc)[:200]) from None
    if not isinstance(doc, dict):
        raise Skip("not_object", f"a JSON {type(doc).__name__}, not an object")
    if _deeper(doc, MAX_DEPTH):
        raise Skip("too_deep", f"nested more than {MAX_DEPTH} deep")
    return doc


class Skips:
    """Skipped records of one topic (or kind of topic), counted per reason."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what  # "catalog record", "heartbeat"... for the log line
        self.reasons: Counter[str] = Counter()
        self.total = 0

    def skip(self, reason: str, detail: str) -> None:
        self.total += 1
        self.reasons[reason] += 1
        if self.total & (self.total - 1) == 0:  # 1st, 2nd, 4th, 8th...: rate-limited
            self._log.warning("skipped a %s (%s: %s; %d skipped so far)", self._what,
                              reason, detail[:200], self.total)
