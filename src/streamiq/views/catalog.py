"""The view catalog: what a changelog holds, published so serving nodes need no user code.

Every ``streamiq`` sink publishes its view's :class:`ViewSpec` to the cluster's catalog
topic (:func:`catalog_topic`, one partition, keyed by view name, compacted:
:data:`CATALOG_TOPIC_CONFIG`) when its query starts, before the query's first rows. A
reader takes the *last* record per key (until the cleaner runs, older descriptions of a
view are still on the topic).

The record value is one JSON object (``ViewSpec.to_json``)::

    {"version": 1, "name": "page_views",
     "key_columns": [{"name": "user_id", "type": "string"}],
     "value_columns": [{"name": "count", "type": "bigint"}],
     "windowed": false, "window": null, "changelog_topic": "page_views-changelog",
     "partitions": 3, "global": false, "description": "", "ticks": []}

``ticks`` (optional, empty by default): the input topics whose tick records the view's
changelog answers within milliseconds (``pipeline/ticks.py``: streamiq's own real-time
views); a node whose read waits for a position of one of them writes a tick there. It
may change from one description to the next (a pipeline restarted in micro-batch mode
publishes none).

Types are Spark's simple strings (``bigint``, ``decimal(38,0)``, ``array<string>``).
``windowed`` views also carry ``window_start``/``window_end`` (epoch ms) in every row.

A description may change only *compatibly* (:func:`incompatibility`): value columns
may be added; the key columns and their types, windowed-ness, changelog topic,
partition count and the ``global`` flag stay, and no existing column changes type or
disappears. Anything else changes what a node already stored means or where its
partitions live, so a sink refuses it and a node keeps the old description.

This module is the whole contract: the serving side imports only it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamiq.kafka.skips import Skip, load_object
from streamiq.views.base import View
from streamiq.views.catalog_bounds import MAX_CATALOG_BYTES, bounds

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["CATALOG_TOPIC_CONFIG", "CATALOG_VERSION", "PROGRESS_TOPIC_CONFIG", "VIEW_NAME",
           "ViewSpec", "catalog_topic", "incompatibility", "progress_topic"]

CATALOG_VERSION = 1
#: view names: also the start of topic names and of URLs (/v1/views/<name>)
VIEW_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")

Columns = tuple[tuple[str, str], ...]  # (name, Spark type), in order


def catalog_topic(cluster: str) -> str:
    """The catalog topic of a cluster (before any topic prefix)."""
    return f"_streamiq-{cluster}-catalog"


def progress_topic(cluster: str) -> str:
    """Where a cluster's pipeline publishes its progress for the dashboards."""
    return f"_streamiq-{cluster}-progress"


#: where the broker applies them: the newest record per view kept, day-old ones dropped
#: the catalog topic's settings: the last description of each view is kept forever
CATALOG_TOPIC_CONFIG = {"cleanup.policy": "compact"}
PROGRESS_TOPIC_CONFIG = {"cleanup.policy": "compact,delete",
                         "retention.ms": str(24 * 3600 * 1000)}


@dataclass(frozen=True, kw_only=True)
class ViewSpec:
    """What a view's changelog holds and where: everything a node needs to serve it."""

    name: str
    key_columns: Columns
    value_columns: Columns
    changelog_topic: str
    partitions: int
    windowed: bool = False
    window: str | None = None  # the window's duration, when the writer knows it
    is_global: bool = False
    description: str = ""
    ticks: tuple[str, ...] = ()  # input topics whose ticks the changelog answers

    def __post_init__(self) -> None:
        if not VIEW_NAME.match(self.name):
            raise ValueError(f"view name {self.name!r} must match {VIEW_NAME.pattern}")
        if not self.key_columns:
            raise ValueError(f"view {self.name!r}: no key columns")
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) \
                or self.partitions < 1:
            raise ValueError(f"view {self.name!r}: partitions must be a positive integer, "
                             f"got {self.partitions!r}")
        names = [c for c, _ in self.key_columns + self.value_columns]
        if len(set(names)) != len(names):
            raise ValueError(f"view {self.name!r}: a column is named twice in {names}")

    @property
    def types(self) -> dict[str, str]:
        """Every key and value column's Spark type."""
        return dict(self.key_columns + self.value_columns)

    def to_json(self) -> bytes:
        return json.dumps({
            "version": CATALOG_VERSION, "name": self.name,
            "key_columns": _columns_out(self.key_columns),
            "value_columns": _columns_out(self.value_columns),
            "windowed": self.windowed, "window": self.window,
            "changelog_topic": self.changelog_topic, "partitions": self.partitions,
            "global": self.is_global, "description": self.description,
            "ticks": list(self.ticks),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> ViewSpec:
        """Decode a catalog record; ValueError when it is not a view description."""
        d = load_object(raw, MAX_CATALOG_BYTES)  # Skip: a ValueError naming a reason
        if d.get("version") != CATALOG_VERSION:
            raise Skip("bad_version", f"catalog version {str(d.get('version'))[:20]!r} is "
                       f"not {CATALOG_VERSION}")
        bounds(d)
        try:
            return cls(name=_typed(d, "name", str),
                       key_columns=_columns_in(d.get("key_columns"), "key_columns"),
                       value_columns=_columns_in(d.get("value_columns"), "value_columns"),
                       changelog_topic=_typed(d, "changelog_topic", str),
                       partitions=_typed(d, "partitions", int),
                       windowed=_typed(d, "windowed", bool),
                       window=d.get("window") if isinstance(d.get("window"), str) else None,
                       is_global=_typed(d, "global", bool),
                       description=str(d.get("description") or ""),
                       ticks=tuple(d.get("ticks", [])))
        except (TypeError, ValueError) as exc:
            raise Skip("bad_spec", str(exc)[:300]) from None

    def to_view(self) -> View:
        """The :class:`View` a serving node needs (no transform: the pipeline runs elsewhere)."""
        return View.served(self.name, [c for c, _ in self.key_columns],
                           [c for c, _ in self.value_columns],
                           window=(self.window or "unknown") if self.windowed else None,
                           types=self.types, description=self.description,
                           is_global=self.is_global)

    @classmethod
    def from_schema(cls, schema: StructType, *, name: str, key_columns: Sequence[str],
                    changelog_topic: str, partitions: int, is_global: bool = False,
                    description: str = "", window: str | None = None,
                    ticks: tuple[str, ...] = ()) -> ViewSpec:
        """The description of a frame of ``schema`` written as a view keyed by
        ``key_columns``: every other column is a value column; a ``window`` struct
        (or ``window_start``/``window_end`` columns) makes it windowed."""
        types = {f.name: f.dataType.simpleString() for f in schema.fields}
        windowed = "window" in types or "window_start" in types
        skip = set(key_columns) | {"window", "window_start", "window_end"}
        return cls(name=name, key_columns=tuple((c, types[c]) for c in key_columns),
                   value_columns=tuple((c, t) for c, t in types.items() if c not in skip),
                   changelog_topic=changelog_topic, partitions=partitions,
                   windowed=windowed, window=window, is_global=is_global,
                   description=description, ticks=ticks)


def incompatibility(old: ViewSpec, new: ViewSpec) -> str | None:
    """Why ``new`` may not replace ``old`` (None: it may; value columns may be added)."""
    for what, a, b in (("key columns", old.key_columns, new.key_columns),
                       ("windowed", old.windowed, new.windowed),
                       ("changelog topic", old.changelog_topic, new.changelog_topic),
                       ("partitions", old.partitions, new.partitions),
                       ("global", old.is_global, new.is_global)):
        if a != b:
            return f"{what} changed from {_show(a)} to {_show(b)}"
    new_types = dict(new.value_columns)
    for col, t in old.value_columns:
        if col not in new_types:
            return f"value column {col!r} ({t}) was removed"
        if new_types[col] != t:
            return f"value column {col!r} changed type from {t} to {new_types[col]}"
    return None


def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(f"{c} {t}" for c, t in v) + ")"
    return json.dumps(v)


def _typed(d: Mapping[str, Any], key: str, kind: type) -> Any:
    v = d.get(key)
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise TypeError(f"field {key!r} must be {kind.__name__}, got {v!r}")
    return v


def _columns_out(cols: Columns) -> list[dict[str, str]]:
    return [{"name": c, "type": t} for c, t in cols]


def _columns_in(raw: Any, key: str) -> Columns:
    if not isinstance(raw, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str)
            and isinstance(c.get("type"), str) for c in raw):
        raise TypeError(f"field {key!r} must be a list of {{name, type}} objects")
    return tuple((c["name"], c["type"]) for c in raw)
