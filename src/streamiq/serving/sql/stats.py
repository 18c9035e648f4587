"""What a node's SQL port answered with errors, for its /metrics, and a log of refused
connections that stays readable in a flood (one line per interval, the rest counted)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from streamiq._sqlstate import sqlstate_of
from streamiq.errors import StreamiqError
from streamiq.serving.sql.plans import Aggregate, CatalogQuery, Fetch, Lookup, Plan, Pushed

__all__ = ["SqlStats", "kind_of"]

log = logging.getLogger("streamiq.sql")


def kind_of(plan: Plan) -> str:
    if isinstance(plan, CatalogQuery):
        return "catalog"
    if isinstance(plan, Aggregate):
        return "aggregate"
    if isinstance(plan, Fetch) and isinstance(plan.source, Lookup):
        return "lookup" if len(plan.source.keys) == 1 else "multiget"
    if isinstance(plan, Fetch) and isinstance(plan.source, Pushed):
        return plan.source.query.kind  # a query type's pushdown (topk...)
    return "scan" if isinstance(plan, Fetch) else "gather"


class SqlStats:
    """ErrorResponses by SQLSTATE, a statement's (the connection stays) or a refused
    connection's (FATAL: a bad password, too many clients, not the protocol)."""

    def __init__(self, log_interval_s: float = 10.0) -> None:
        self.errors: Counter[tuple[str, str]] = Counter()  # (sqlstate, statement|connection)
        self.statements: Counter[str] = Counter()  # run, by kind (kind_of)
        self.log_interval_s = log_interval_s
        self._logged = float("-inf")
        self._held = 0  # refused connections not logged since the last line

    def error(self, exc: StreamiqError, *, fatal: bool) -> None:
        state = sqlstate_of(exc)
        self.errors[(state, "connection" if fatal else "statement")] += 1
        if fatal:
            self._refused(state, exc.message)

    def _refused(self, state: str, message: str) -> None:
        now = time.monotonic()
        if now - self._logged < self.log_interval_s:
            self._held += 1
            return
        more = f" ({self._held} more since the last such line)" if self._held else ""
        log.warning("SQL connection refused (%s): %s%s", state, message[:200], more)
        self._logged, self._held = now, 0

    def ran(self, plan: Plan) -> None:
        self.statements[kind_of(plan)] += 1

    def metrics(self) -> Iterator[Metric]:
        ran = CounterMetricFamily(
            "streamiq_sql_statements", "SQL statements run, by how they read the views: "
            "lookup, multiget, scan, aggregate, topk (pushed down to the owners), gather (rows "
            "gathered for DuckDB: joins, subqueries...), catalog (no view)", labels=["kind"])
        for kind, n in sorted(self.statements.items()):
            ran.add_metric([kind], n)
        yield ran
        errors = CounterMetricFamily(
            "streamiq_sql_errors", "SQL errors answered, by SQLSTATE; scope connection: the "
            "connection was refused (FATAL)", labels=["sqlstate", "scope"])
        for (state, scope), n in sorted(self.errors.items()):
            errors.add_metric([state, scope], n)
        yield errors
