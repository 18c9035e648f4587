"""Ticks: how a changelog partition says, within milliseconds, that it holds every row
of the input before a point (real-time mode).

A row's own positions (``positions.py``) tell a reader about its key only, and the
batch markers come once per real-time batch (minutes). A *tick* is an input record keyed
:data:`~streamiq.views.base.TICK_KEY`, written (by a node whose read waits for a
position) to one input partition ``p`` at offset ``o``. The view's query folds it like a
record, but into many rows at once: :func:`tick_rows` explodes it into one row per
(aggregation task ``s``, changelog partition ``c``), each keyed by a crafted key
(:func:`craft_keys`) that Spark's shuffle sends to task ``s`` and Kafka's partitioner
puts in ``c``. Every task therefore folds the tick after every record of ``p`` before
``o`` that it was sent (the shuffle keeps each source task's order; a source task reads
``p`` in order), and writes its tick row to every changelog partition after the rows of
those records (one task's rows reach a partition in the order it wrote them). The tick
row carries the usual position header (``p: o``, the newest tick it folded) and
:data:`~streamiq.views.base.TICK_HEADER` (``s/S``: the task that wrote it, from
``spark_partition_id()``, and how many there are), so a node that has every task's tick
row in ``c`` at or past ``o`` knows ``c`` holds every row of ``p`` before ``o``
(``serving/changelog/ticks.py``).

Only views the pipeline aggregates by string key columns, with no window, in real-time
mode (:attr:`~streamiq.views.base.View.ticks_ok`): a crafted key must be text, and a
tick has no event time to move a window's watermark. Other views' queries drop ticks
like any invalid record (and the dead-letter queries skip them): their positions are
answered by the batch markers, as the catalog says per view.

Crafting needs the number of aggregation tasks of the *running* query, which a stateful
query takes from its checkpoint (:func:`shuffle_tasks`), and Spark's own hash: the
candidates' task is Spark's ``pmod(hash(key columns), S)``, the expression of its
``HashPartitioning``, computed in Python (``sparkhash.py``; no Spark job at start), their
changelog partition by ``kafka/partitioner.py``. A node
checks each tick row's task against the one its key was crafted for, so a wrong count
makes ticks refused, never trusted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from streamiq.kafka.partitioner import partition_for
from streamiq.pipeline.sparkhash import task_of
from streamiq.views.base import KEY_SEP, TICK_HEADER, TICK_KEY, TICK_PREFIX, View

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["TICK_VALUE", "Ticks", "craft_keys", "is_tick", "plan_ticks", "shuffle_tasks",
           "tick_header", "tick_key_text", "tick_rows"]

log = logging.getLogger("streamiq.pipeline")

#: a tick's value: a JSON object (parsed like any record's, its fields null)
TICK_VALUE = b"{}"
_CANDIDATES = 1 << 18  # tried per (task, partition) before giving up


@dataclass(frozen=True)
class Ticks:
    """What a view's query folds ticks into: one key per (task, changelog partition)."""

    keys: list[tuple[str, ...]] = field(default_factory=list)
    tasks: int = 0  # the aggregation's tasks (0: no ticks)


class _Run(Protocol):
    view: View
    checkpoint: str

    @property
    def markers(self) -> Any: ...


def plan_ticks(run: _Run, default_tasks: int) -> Ticks | None:
    """The ticks of a view's real-time query (None when it cannot fold them:
    :attr:`~streamiq.views.base.View.ticks_ok`); ``default_tasks`` for a fresh checkpoint."""
    view, partitions = run.view, run.markers.partitions
    if not view.ticks_ok:
        return None
    tasks = shuffle_tasks(run.checkpoint, default_tasks)
    keys = craft_keys(view, tasks, partitions)
    log.info("view %s: ticks fold into %d keys (%d tasks x %d changelog partitions)",
             view.name, len(keys), tasks, partitions)
    return Ticks(keys, tasks)


def tick_key_text(task: int, partition: int, n: int) -> str:
    """The first key column of the ``n``-th candidate crafted for (``task``, ``partition``)."""
    return f"{TICK_PREFIX}{task}.{partition}.{n}"


def shuffle_tasks(checkpoint: str | Path, default: int) -> int:
    """The aggregation tasks of the view's query: what its checkpoint's newest offset
    log entry recorded (a stateful query keeps its first count for life), else
    ``default`` (a fresh checkpoint takes the session's ``spark.sql.shuffle.partitions``)."""
    offsets = Path(checkpoint) / "offsets"
    entries = sorted((int(f.name) for f in offsets.iterdir() if f.name.isdigit()),
                     reverse=True) if offsets.is_dir() else []
    for n in entries:
        try:
            lines = (offsets / str(n)).read_text().splitlines()
            conf = json.loads(lines[1]).get("conf", {})
            return int(conf["spark.sql.shuffle.partitions"])
        except (OSError, IndexError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return default


def craft_keys(view: View, tasks: int, partitions: int) -> list[tuple[str, ...]]:
    """One key (the view's key columns' values) per (task, changelog partition), task-major:
    Spark's shuffle sends it to that task (``sparkhash.task_of``) and Kafka's partitioner
    puts its row in that partition."""
    rest = (TICK_PREFIX,) * (len(view.key_columns) - 1)
    found: dict[tuple[int, int], tuple[str, ...]] = {}
    for s in range(tasks):
        for c in range(partitions):
            for n in range(_CANDIDATES):
                key = (tick_key_text(s, c, n), *rest)
                if (partition_for(KEY_SEP.join(key).encode(), partitions) == c
                        and task_of(key, tasks) == s):
                    found[(s, c)] = key
                    break
            else:
                raise RuntimeError(f"view {view.name}: no tick key found for {(s, c)}")
    return [found[(s, c)] for s in range(tasks) for c in range(partitions)]


def is_tick() -> Column:
    """True for a tick record, on ``deadletter.parse_input``'s columns."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("_streamiq_key") == F.lit(TICK_KEY), F.lit(False))


def tick_rows(df: DataFrame, view: View, keys: Sequence[tuple[str, ...]]) -> DataFrame:
    """``df`` (valid records and ticks, with a boolean ``_streamiq_tick`` column) with each
    tick replaced by one row per crafted key (its other columns as the tick's: null
    fields, its topic, partition, offset and time); records pass unchanged."""
    from pyspark.sql import functions as F

    cols = view.key_columns
    crafted = F.array(*[F.struct(*[F.lit(v).alias(c) for v, c in zip(k, cols, strict=True)])
                        for k in keys])
    own = F.array(F.struct(*[F.col(f"`{c}`").alias(c) for c in cols]))
    exploded = df.withColumn("_streamiq_k", F.explode(
        F.when(F.col("_streamiq_tick"), crafted).otherwise(own)))
    others = [c for c in df.columns if c not in cols and c != "_streamiq_tick"]
    return exploded.select(*[F.col("_streamiq_k")[c].alias(c) for c in cols],
                           *[F.col(f"`{c}`") for c in others])


def tick_header(view: View, tasks: int) -> Column:
    """A changelog record's :data:`TICK_HEADER` struct for a tick row (its value null
    for any other row): ``task/tasks``, the task being the aggregation's partition."""
    from pyspark.sql import functions as F

    first = F.col(f"`{view.key_columns[0]}`")
    value = F.when(first.startswith(TICK_PREFIX), F.concat(
        F.spark_partition_id().cast("string"), F.lit(f"/{tasks}")))
    return F.struct(F.lit(TICK_HEADER).alias("key"), value.cast("binary").alias("value"))
