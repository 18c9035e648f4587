"""Views: named Spark aggregations with a key, loaded by the pipeline and the nodes.

The changelog contract (shared by the pipeline's sink and the nodes) lives here:

* record key: the view key, its columns' values joined by ``|`` (UTF-8);
* partition: Kafka's default partitioner over that key (murmur2), so every record of a
  key — for windowed views, every window of a key — lands in one partition;
* value: the row as a JSON object; timestamps as epoch milliseconds; windowed rows carry
  ``window_start`` and ``window_end``;
* after each batch the pipeline writes one *marker* to every changelog partition
  (header ``streamiq-marker``, key :data:`MARKER_KEY`) whose value names the input offsets
  the batch reflects: ``{"batch_id": n, "offsets": {topic: {partition: next_offset}}}``;
* rows of views whose aggregation the pipeline builds carry headers
  :data:`POSITION_HEADER` (``topic:partition:offset,...``: per input partition, the last
  offset the row folded) and :data:`TIME_HEADER` (the newest input timestamp it folded,
  epoch ms; ``pipeline/positions.py``);
* the topic is compacted (:data:`CHANGELOG_TOPIC_CONFIG`): a node restoring from empty
  reads about one record per key, and the last marker of each partition;
* *ticks* (real-time mode, views whose aggregation the pipeline builds by their string
  key columns: :attr:`View.ticks_ok`): a record keyed :data:`TICK_KEY` in an input
  partition is folded by every aggregation task into a row whose key starts with
  :data:`TICK_PREFIX`, one per (task, changelog partition), with the header
  :data:`TICK_HEADER` (``task/tasks``); when every task's tick row in a changelog
  partition names an input offset, the partition holds every row of the records before
  it (``pipeline/ticks.py``, ``serving/changelog/ticks.py``). Tick rows are no view rows.
"""

from __future__ import annotations

import importlib
import inspect
import json
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamiq.kafka.partitioner import partition_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "CHANGELOG_TOPIC_CONFIG", "ID_PATTERN", "KEY_SEP", "MARKER_HEADER", "MARKER_KEY",
    "MAX_KEY_BYTES", "POSITION_HEADER", "TICK_HEADER", "TICK_KEY", "TICK_PREFIX",
    "TIME_HEADER", "App", "View", "decode_key",
    "encode_key", "load_app", "store_key", "window_bounds",
]

#: ids in the examples' URLs (accounts, orders, stores): what ingest accepts and
#: what the /account/{id} shortcut answers
ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"

KEY_SEP = "|"
MARKER_HEADER = "streamiq-marker"
#: a row's input positions (``topic:partition:offset`` joined by ``,``, offsets inclusive)
POSITION_HEADER = "streamiq-pos"
#: the newest input timestamp a row reflects (epoch ms, decimal text)
TIME_HEADER = "streamiq-ts"
#: an input record with this key is a tick, not data (not UTF-8: no ingest key is it)
TICK_KEY = b"\xffstreamiq-tick"
#: the key columns of a tick's rows start with it; a data record whose key column does is
#: dead-lettered (``~`` is outside :data:`ID_PATTERN`, so the ingest never writes one)
TICK_PREFIX = "~tick~"
#: a tick row's header: ``task/tasks``, the aggregation task that wrote it and how many
TICK_HEADER = "streamiq-tick"
#: the markers' key: a compacted topic refuses null keys, and this one (not UTF-8) can
#: never be a view's key; compaction keeps each partition's last marker
MARKER_KEY = b"\xffstreamiq-marker"
#: settings of every changelog topic: compacted, the last row of each key kept
CHANGELOG_TOPIC_CONFIG: Mapping[str, str] = {"cleanup.policy": "compact"}
_WINDOW_SUFFIX = struct.Struct(">q")


#: the longest key a view accepts (UTF-8 bytes), in lookups, multi-gets and metadata
MAX_KEY_BYTES = 1024


def _elsewhere(*_: Any) -> Any:
    raise RuntimeError("a view only served here has no transform: its pipeline runs elsewhere")


@dataclass(frozen=True, kw_only=True)
class View:
    """A named, keyed aggregation over one or more input topics.

    ``transform`` receives the parsed input (the columns of ``value_schema`` plus
    ``kafka_timestamp``) and returns the aggregated frame holding ``key_columns``,
    ``value_columns`` and, for windowed views, ``window_start``/``window_end``. A
    transform may take a second argument, ``extra``: aggregate columns by name, to add to
    its aggregation and keep in its output under those names. The pipeline then makes
    each row carry the input positions and time it reflects (``pipeline/positions.py``):
    reads of the written key see their own writes at once, and nodes measure freshness.
    ``required`` columns must be non-null and each ``checks`` entry is a Spark SQL
    condition with the reason reported when a record fails it; failing records go to
    the dead-letter topic instead of the view.
    """

    name: str
    source_topics: tuple[str, ...]
    value_schema: str
    transform: Callable[..., DataFrame]
    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    required: tuple[str, ...] = ()
    checks: tuple[tuple[str, str], ...] = ()
    window: str | None = None
    watermark: str | None = None
    event_time: str | None = None
    description: str = ""
    #: A valid input record (JSON-able): the pipeline runs the view's plan on it once
    #: before it says ready, so the first real write does not pay the JVM's and Python
    #: workers' warm-up. ``None``: one is made from ``value_schema``.
    example: Mapping[str, Any] | None = field(default=None, compare=False)
    #: Global (Kafka Streams' GlobalKTable): every serving node holds every partition,
    #: so a lookup is answered where it arrives. For small reference tables.
    is_global: bool = False
    #: Spark types (simple strings: ``bigint``, ``decimal(38,0)``) of the columns, where
    #: known: serving nodes check changelog rows against them (``views/rows.py``)
    types: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def served(cls, name: str, key_columns: Sequence[str], value_columns: Sequence[str], *,
               window: str | None = None, types: Mapping[str, str] | None = None,
               description: str = "", is_global: bool = False) -> View:
        """A view as a process that only serves its rows knows it (a node's view found
        on the catalog, a replayer's): their shape, and no transform (its pipeline runs
        elsewhere)."""
        return cls(name=name, source_topics=(), value_schema="", transform=_elsewhere,
                   key_columns=tuple(key_columns), value_columns=tuple(value_columns),
                   window=window, types=dict(types or {}), description=description,
                   is_global=is_global)

    @property
    def ticks_ok(self) -> bool:
        """The pipeline can fold ticks into this view (real-time mode): it builds the
        aggregation (``takes_extra``), by key columns all of type ``string`` (a tick row's
        key is crafted text), and no window (a tick has no event time to move one)."""
        return (self.takes_extra and not self.windowed and bool(self.key_columns)
                and all(self.types.get(c) == "string" for c in self.key_columns))

    @property
    def changelog_topic(self) -> str:
        return f"{self.name}-changelog"

    @property
    def takes_extra(self) -> bool:
        """The transform takes ``extra`` aggregates (see the class's docstring)."""
        try:
            return "extra" in inspect.signature(self.transform).parameters
        except (TypeError, ValueError):  # a builtin or C callable: no signature
            return False

    @property
    def windowed(self) -> bool:
        return self.window is not None

    @property
    def columns(self) -> tuple[str, ...]:
        extra = ("window_start", "window_end") if self.windowed else ()
        return self.key_columns + extra + self.value_columns

    def key_of(self, row: Mapping[str, Any]) -> str:
        return encode_key(row[c] for c in self.key_columns)

    def partition_of(self, key: str, partitions: int) -> int:
        return partition_for(key.encode(), partitions)

    def parse_key(self, key: str) -> dict[str, str]:
        """Split a ``|``-joined key into its columns (400-worthy ValueError if malformed:
        the wrong number of columns, an empty one, longer than ``MAX_KEY_BYTES`` in UTF-8,
        or not encodable as UTF-8 at all, e.g. a lone surrogate)."""
        return dict(zip(self.key_columns, self._checked(key)[1], strict=True))

    def checked_key(self, key: str) -> bytes:
        """The key's UTF-8 bytes, once ``parse_key`` would accept it (its ValueError
        otherwise): what the lean path checks, without building the columns."""
        return self._checked(key)[0]

    def _checked(self, key: str) -> tuple[bytes, list[str]]:
        """The key's UTF-8 bytes and its columns' values, or the ValueError naming what
        is wrong with it."""
        try:
            raw = key.encode()
        except UnicodeEncodeError:
            raise ValueError(f"view {self.name!r}: the key is not valid Unicode "
                             f"(a lone surrogate?): {key!r}") from None
        if len(raw) > MAX_KEY_BYTES:
            raise ValueError(f"view {self.name!r}: the key is {len(raw)} bytes in UTF-8, more "
                             f"than {MAX_KEY_BYTES}")
        parts = decode_key(key)
        if len(parts) != len(self.key_columns) or "" in parts:
            cols = KEY_SEP.join(self.key_columns)
            raise ValueError(f"view {self.name!r} keys have the form {cols!r}, got {key!r}")
        return raw, parts

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description,
            "key_columns": list(self.key_columns), "value_columns": list(self.value_columns),
            "windowed": self.windowed, "window": self.window,
            "source_topics": list(self.source_topics), "changelog_topic": self.changelog_topic,
            "key_format": KEY_SEP.join(self.key_columns), "global": self.is_global,
        }


@dataclass(frozen=True, kw_only=True)
class App:
    """A deployable set of input topics and views (the bank or orders example, or yours)."""

    name: str
    topics: tuple[str, ...]
    views: tuple[View, ...]

    def view(self, name: str) -> View | None:
        return next((v for v in self.views if v.name == name), None)


def encode_key(values: Iterable[Any]) -> str:
    return KEY_SEP.join(str(v) for v in values)


def decode_key(key: str) -> list[str]:
    return key.split(KEY_SEP)


def store_key(key: str, window_start: int | None = None) -> bytes:
    """Byte key in a node's store: the view key, plus a big-endian window start."""
    raw = key.encode()
    if window_start is None:
        return raw
    return raw + b"\x00" + _WINDOW_SUFFIX.pack(window_start)


def window_bounds(key: str, start_ms: int, end_ms: int) -> tuple[bytes, bytes]:
    """Store-key range [lo, hi) holding ``key``'s windows starting in [start_ms, end_ms)."""
    return store_key(key, start_ms), store_key(key, end_ms)


def marker_value(batch_id: int, offsets: Mapping[str, Mapping[int, int]]) -> bytes:
    return json.dumps({"batch_id": batch_id, "offsets": {
        t: {str(p): o for p, o in po.items()} for t, po in offsets.items()}}).encode()


_APPS = {"bank": "streamiq.views.bank", "orders": "streamiq.views.orders"}


def load_app(names: str | Sequence[str], views_module: str | None = None) -> App:
    """Load built-in apps by name (``bank``, ``orders``, ``bank,orders``) or a module's APP."""
    if views_module:
        mod = importlib.import_module(views_module)
        app = getattr(mod, "APP", None)
        if not isinstance(app, App):
            raise ValueError(f"module {views_module!r} defines no streamiq App named APP")
        return app
    wanted = [n.strip() for n in (names.split(",") if isinstance(names, str) else names)]
    apps: list[App] = []
    for n in wanted:
        if n not in _APPS:
            raise ValueError(f"unknown app {n!r}; choose from {', '.join(sorted(_APPS))}")
        apps.append(importlib.import_module(_APPS[n]).APP)
    if len(apps) == 1:
        return apps[0]
    return App(name=",".join(a.name for a in apps),
               topics=tuple(t for a in apps for t in a.topics),
               views=tuple(v for a in apps for v in a.views))
