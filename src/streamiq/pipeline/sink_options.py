"""Options of the ``streamiq`` sink, validated on the driver with errors naming the option.

Parsed once on the driver by ``streamiq.sink(df).start()``. Option names compare
case-insensitively, as Spark's do.

=================  ========  ====================================================
option             default   meaning
=================  ========  ====================================================
view               required  view name (``[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}``)
key                required  key column(s), comma-separated
kafka.*                      librdkafka settings; ``kafka.bootstrap.servers`` required
partitions         existing  changelog partitions when the sink creates the topic
                   or 3      (an existing topic keeps its count)
cluster            streamiq  cluster name: the catalog is ``_streamiq-<cluster>-catalog``
topicPrefix        ""        prefix of the changelog and catalog topics
global             false     every serving node holds the whole view
description        ""        free text, published in the catalog
window             unset     the window's duration, published in the catalog
checkpointLocation required  the query's checkpoint (the markers' offsets are read there)
ticks              ""        input topics whose ticks the view folds (set by streamiq's
                             own pipeline: ``pipeline/ticks.py``), comma-separated
=================  ========  ====================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamiq.defaults import DEFAULT_CLUSTER
from streamiq.views.catalog import VIEW_NAME, catalog_topic
from streamiq.views.catalog_bounds import TOPIC_NAME

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["KEY_TYPES", "OUTPUT_MODES", "SinkOptions", "check_output_mode",
           "parse_sink_options"]

_CLUSTER = re.compile(r"^[A-Za-z0-9._-]{1,100}$")  # as Settings.cluster
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{0,100}$")  # as Settings.topic_prefix
_KNOWN = {"view", "key", "partitions", "cluster", "topicprefix", "global", "description",
          "window", "checkpointlocation", "path", "ticks"}
#: key column types whose text (the changelog key) is the same in Spark and in Arrow:
#: a double's or a timestamp's text differs between the two, and keys must be exact
KEY_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date", "decimal")
OUTPUT_MODES = ("update", "append")
_WINDOW_COLUMNS = ("window", "window_start", "window_end")


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options (``kafka`` holds librdkafka settings, ``kafka.`` removed)."""

    view: str
    key: tuple[str, ...]
    kafka: dict[str, str]
    checkpoint: str | None = None
    partitions: int | None = None
    cluster: str = DEFAULT_CLUSTER
    topic_prefix: str = ""
    is_global: bool = False
    description: str = ""
    window: str | None = None
    ticks: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def changelog_topic(self) -> str:
        return f"{self.topic_prefix}{self.view}-changelog"

    @property
    def catalog_topic(self) -> str:
        return self.topic_prefix + catalog_topic(self.cluster)


def check_output_mode(mode: str) -> str:
    m = mode.strip().lower()
    if m not in OUTPUT_MODES:
        raise ValueError(f"outputMode {mode!r} is not supported by the streamiq sink: use "
                         "'update' (changed rows of an aggregation) or 'append'")
    return m


def _get(opts: Mapping[str, str], name: str) -> str | None:
    v = opts.get(name.lower())
    return None if v is None else str(v)


def _bool(opts: Mapping[str, str], name: str) -> bool:
    raw = _get(opts, name)
    if raw is None:
        return False
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"option '{name}': expected true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _int(opts: Mapping[str, str], name: str, low: int) -> int | None:
    raw = _get(opts, name)
    if raw is None:
        return None
    s = raw.strip()
    if not s.lstrip("-").isdigit() or int(s) < low:
        what = "a positive integer" if low > 0 else f"an integer >= {low}"
        raise ValueError(f"option '{name}' must be {what}, got {raw!r}")
    return int(s)


def _matching(opts: Mapping[str, str], name: str, pattern: re.Pattern[str], default: str
              ) -> str:
    v = _get(opts, name)
    if v is None:
        return default
    if not pattern.match(v):
        raise ValueError(f"option '{name}': {v!r} must match {pattern.pattern}")
    return v


def _key(opts: Mapping[str, str], schema: StructType | None) -> tuple[str, ...]:
    raw = _get(opts, "key")
    key = tuple(k.strip() for k in (raw or "").split(","))
    if raw is None or not all(key):
        raise ValueError("option 'key' must name the key column(s), comma-separated "
                         f"(got {raw!r})")
    if len(set(key)) != len(key):
        raise ValueError(f"option 'key': a column is named twice in {raw!r}")
    if schema is None:
        return key
    types = {f.name: f.dataType for f in schema.fields}
    for k in key:
        if k not in types:
            raise ValueError(f"option 'key': column {k!r} is not in the data frame "
                             f"(columns: {', '.join(types)})")
        if k in _WINDOW_COLUMNS:
            raise ValueError(f"option 'key': {k!r} cannot be a key column (windows are part "
                             "of a windowed view's rows, not of its key)")
        t = types[k].simpleString()
        if not any(t == ok or t.startswith(ok + "(") for ok in KEY_TYPES):
            raise ValueError(f"option 'key': column {k!r} has type {t}; key columns must be "
                             f"one of {', '.join(KEY_TYPES)}")
    return key


def parse_sink_options(options: Mapping[str, Any], schema: StructType | None = None
                       ) -> SinkOptions:
    """Validate sink options (``schema``: the written frame's, to check key columns)."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    kafka = {str(k)[len("kafka."):]: str(v) for k, v in options.items()
             if str(k).lower().startswith("kafka.") and len(str(k)) > len("kafka.")}
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        raise ValueError(f"unknown option '{unknown[0]}' of the streamiq sink (known: view, "
                         "key, kafka.*, partitions, cluster, topicPrefix, global, "
                         "description, window, checkpointLocation)")
    view = _get(opts, "view")
    if view is None:
        raise ValueError("option 'view' must be specified (the view's name)")
    if not VIEW_NAME.match(view):
        raise ValueError(f"option 'view': {view!r} must match {VIEW_NAME.pattern}")
    key = _key(opts, schema)
    if not kafka.get("bootstrap.servers"):
        raise ValueError("option 'kafka.bootstrap.servers' must be specified")
    if schema is not None:
        windowed = {"window_start", "window_end"} & set(schema.fieldNames())
        if windowed and "window" in schema.fieldNames():
            raise ValueError("the data frame has both a 'window' column and "
                             f"{sorted(windowed)}: keep one form")
    return SinkOptions(
        view=view, key=key, kafka=kafka, checkpoint=_get(opts, "checkpointLocation"),
        partitions=_int(opts, "partitions", 1),
        cluster=_matching(opts, "cluster", _CLUSTER, DEFAULT_CLUSTER),
        topic_prefix=_matching(opts, "topicPrefix", _PREFIX, ""),
        is_global=_bool(opts, "global"), description=_get(opts, "description") or "",
        window=_get(opts, "window"), ticks=_topics(opts, "ticks"))


def _topics(opts: Mapping[str, str], name: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in (_get(opts, name) or "").split(",") if t.strip())
    bad = [t for t in topics if not TOPIC_NAME.match(t)]
    if bad:
        raise ValueError(f"option '{name}': {bad[0]!r} is not a Kafka topic name")
    return topics
