"""Query parameters the HTTP routes share, declared once (OpenAPI shows them at /docs).

``Fresh`` gathers the ones every query takes to say how fresh its answer must be: the
replica's lag bound and a position to wait for (read-your-writes). Without
``from __future__ import annotations``: FastAPI reads ``Freshness``'s field types when
it builds the dependency, and a class has no globals to resolve string annotations in.
"""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query

from streamiq.serving.engines.scan import MAX_LIMIT
from streamiq.serving.query import model

__all__ = ["MAX_MS", "Aggs", "Consistent", "Cursor", "Fresh", "Freshness", "FromMs", "GroupBy",
           "Limit", "MaxLag", "MaxStaleness", "Position", "Prefix", "ToMs", "WaitMs"]

MaxLag = Annotated[int | None, Query(ge=0, description="Max changelog lag (records) of the "
                                     "answering replica(s); default: the node's --max-lag.")]
Position = Annotated[str | None, Query(description=(
    "Position token(s) topic:partition:offset[,...]: the offset a producer got for its "
    "write (from ingest, or any Kafka producer's delivery report). The answer waits until "
    "every partition it reads reflects them."))]
WaitMs = Annotated[int | None, Query(ge=0, le=120_000, description="Bound on the position "
                                     "wait (ms); default: the node's --wait-timeout-ms.")]
MaxStaleness = Annotated[int | None, Query(ge=0, le=3_600_000, description=(
    "The answer reflects every input record appended more than this many ms before the "
    "query (each replica proves it with ticks of its own: real-time mode, views without "
    "windows), or 503 NOT_UP_TO_BOUND after wait_ms."))]
Consistent = Annotated[bool, Query(description=(
    "Answer at one cut of the input across every partition (multi-get, scan, aggregate, "
    "top-k of a view with ticks): exactly the input records up to the position vector "
    "returned as `cut`, no more, none less."))]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size (rows).")]
Cursor = Annotated[str | None, Query(description="Resume after the page that returned it.")]
Prefix = Annotated[str | None, Query(description="Only keys starting with this.")]
GroupBy = Annotated[list[str] | None, Query(description="Column(s) to group by (repeat or "
                                            "comma-separate); none: one group.")]
Aggs = Annotated[list[str] | None, Query(description="FUNC(COLUMN), repeatable; FUNC is "
                                         "count, sum, min, max or avg; count(*) counts rows. "
                                         "Default count(*).")]
#: window bounds are stored as signed 64-bit epoch ms
MAX_MS = (1 << 63) - 1
FromMs = Annotated[int, Query(alias="from", ge=0, le=MAX_MS,
                              description="Window start >= (epoch ms).")]
ToMs = Annotated[int, Query(alias="to", ge=0, le=MAX_MS,
                            description="Window start < (epoch ms).")]


@dataclass
class Freshness:
    """How fresh an answer must be: a lag bound, a position to wait for, a staleness
    bound."""

    max_lag: MaxLag = None
    position: Position = None
    wait_ms: WaitMs = None
    max_staleness_ms: MaxStaleness = None
    consistent: Consistent = False

    def typed(self) -> model.Freshness:
        """The query layer's ``Freshness`` (``serving/query/model.py``)."""
        return model.Freshness(self.max_lag, self.position, self.wait_ms,
                               self.max_staleness_ms, self.consistent)


Fresh = Annotated[Freshness, Depends()]
