"""One dead letter: an input record's bytes as a JSON document that always fits.

Pure Python, no Spark: :func:`build` turns a bad input record (any bytes as key and
value, any size up to the broker's limit) into the dead-letter topic's record::

    {"reason", "view", "topic", "partition", "offset", "timestamp",
     "key", "key_encoding", "key_bytes", "value", "value_encoding", "value_bytes",
     "truncated"}

``key``/``value`` hold the record's bytes as text when they are valid UTF-8
(``*_encoding`` ``"utf-8"``), else in base64 (``"base64"``); null stays null.
``*_bytes`` is the original size. When the whole record would not fit under
``max_bytes`` the key is cut to :data:`KEY_MAX` bytes and the value to what is left
(``"truncated": true``); topic, partition and offset always name the original.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["KEY_MAX", "RECORD_OVERHEAD", "DeadLetter", "build", "reason_class"]

#: bytes of the input key kept in a truncated dead letter (and as its Kafka key)
KEY_MAX = 1024
#: a Kafka record batch's framing around one record (61-byte batch header, the record's
#: varints and attributes), with room to spare
RECORD_OVERHEAD = 256


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None  # the dead letter's Kafka key: the input key, at most KEY_MAX bytes
    value: bytes  # the JSON document
    truncated: bool


def _encode(raw: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding) of raw bytes: UTF-8 text when valid, else base64."""
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _cut(raw: bytes, n: int) -> bytes:
    """The first ``n`` bytes of ``raw``, not ending inside a UTF-8 character when ``raw``
    is valid UTF-8 (a cut character would make a valid value look binary)."""
    if n >= len(raw):
        return raw
    head = raw[:n]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return head
    return head.decode("utf-8", "ignore").encode("utf-8")


def _doc(meta: dict[str, Any], key: bytes | None, value: bytes | None, key_size: int,
         value_size: int, truncated: bool) -> bytes:
    k, k_enc = _encode(key)
    v, v_enc = _encode(value)
    doc = {**meta, "key": k, "key_encoding": k_enc, "key_bytes": key_size,
           "value": v, "value_encoding": v_enc, "value_bytes": value_size,
           "truncated": truncated}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")


def build(reason: str, view: str, topic: str, partition: int, offset: int,
          timestamp: int | None, key: bytes | None, value: bytes | None,
          max_bytes: int) -> DeadLetter:
    """The dead letter of one input record, its Kafka key + value under ``max_bytes``
    (the dead-letter topic's limit) with :data:`RECORD_OVERHEAD` to spare."""
    meta = {"reason": reason, "view": view, "topic": topic, "partition": partition,
            "offset": offset, "timestamp": timestamp}
    key_size = len(key) if key is not None else 0
    value_size = len(value) if value is not None else 0
    kafka_key = key if key is None or key_size <= KEY_MAX else key[:KEY_MAX]
    room = max_bytes - RECORD_OVERHEAD - (len(kafka_key) if kafka_key else 0)
    whole = _doc(meta, key, value, key_size, value_size, False)
    if len(whole) <= room:
        return DeadLetter(kafka_key, whole, False)
    short_key = None if key is None else _cut(key, KEY_MAX)
    value_part = b"" if value is None else value
    empty = _doc(meta, short_key, None if value is None else b"", key_size, value_size, True)
    if len(empty) > room:  # a limit below the metadata: reason cut, key and value dropped
        meta["reason"] = reason[:200]
        return DeadLetter(None, _doc(meta, None, None, key_size, value_size, True), True)
    n = min(len(value_part), room - len(empty))  # escapes and base64 only grow text
    while True:
        doc = _doc(meta, short_key, _cut(value_part, n), key_size, value_size, True)
        if len(doc) <= room or n == 0:
            return DeadLetter(kafka_key, doc, True)
        over = len(doc) - room
        n = max(0, min(n - 1, n - over * n // max(1, len(doc) - len(empty)) - 1))


def reason_class(reason: str) -> str:
    """A reason without the field names it lists (a bounded metric label)."""
    head = reason.split(":", 1)[0]
    return head if head != "check failed" else reason
