"""What a catalog record may claim: bounds checked before a node believes it.

Anyone who can write the catalog topic can describe a view, and every node serves what
the catalog describes: a record claiming a million partitions would make every node
hold, report and heartbeat a million partitions. Catalog records are not signed (a
user's own pipeline publishes through ``streamiq.sink`` without the cluster secret:
docs/design.md, "What the catalog may claim"), so a node refuses what cannot be
instead. :func:`bounds` checks a decoded record's fields; the partition count and the
number of views are bounded by settings where the node applies them
(``serving/changelog/discovery.py``: ``max_view_partitions``, ``max_views``). A record out of
bounds raises :class:`~streamiq.kafka.skips.Skip` with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from streamiq.kafka.skips import Skip

__all__ = ["MAX_CATALOG_BYTES", "MAX_COLUMNS", "MAX_NAME_CHARS", "MAX_TEXT_CHARS",
           "MAX_TICK_TOPICS", "TOPIC_NAME", "bounds"]

#: a description of MAX_COLUMNS columns with long types stays well below this
MAX_CATALOG_BYTES = 256 << 10
#: key and value columns of one view (Spark's widest practical aggregates are far below)
MAX_COLUMNS = 512
#: a column name; a column's Spark type string may be 4x this (nested structs)
MAX_NAME_CHARS = 256
#: a view's description and window
MAX_TEXT_CHARS = 4096
#: Kafka's own rule for topic names
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _name(v: Any, limit: int, what: str) -> None:
    if isinstance(v, str) and (not v or len(v) > limit or not v.isprintable()):
        raise Skip("bad_name", f"{what} {v[:40]!r}... is empty, longer than {limit} "
                   "characters or not printable")


def _columns(d: Mapping[str, Any]) -> None:
    lists = [d.get(k) for k in ("key_columns", "value_columns")]
    cols = [c for cs in lists if isinstance(cs, list) for c in cs]
    if len(cols) > MAX_COLUMNS:
        raise Skip("too_many_columns", f"{len(cols)} columns (limit {MAX_COLUMNS})")
    for c in cols:
        if isinstance(c, dict):
            _name(c.get("name"), MAX_NAME_CHARS, "column name")
            _name(c.get("type"), 4 * MAX_NAME_CHARS, "column type")


#: input topics a view's ticks are written to (a view reads a handful)
MAX_TICK_TOPICS = 64


def _ticks(d: Mapping[str, Any]) -> None:
    ticks = d.get("ticks", [])
    if not isinstance(ticks, list) or len(ticks) > MAX_TICK_TOPICS or not all(
            isinstance(t, str) and TOPIC_NAME.match(t) for t in ticks):
        raise Skip("bad_spec", f"ticks must be a list of at most {MAX_TICK_TOPICS} Kafka "
                   "topic names")


def bounds(d: Mapping[str, Any]) -> None:
    """Raise Skip unless a decoded catalog record's names, columns and texts are within
    bounds (types are checked by ``ViewSpec.from_json``)."""
    _columns(d)
    _ticks(d)
    topic = d.get("changelog_topic")
    if isinstance(topic, str) and not TOPIC_NAME.match(topic):
        raise Skip("bad_name", f"changelog topic {topic[:40]!r} is not a Kafka topic name")
    for key in ("description", "window"):
        v = d.get(key)
        if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
            raise Skip("too_large", f"{key} of {len(v)} characters (limit {MAX_TEXT_CHARS})")
    name = d.get("name")
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise Skip("bad_name", f"view name of {len(name)} characters")
