"""The node's SQL port: a ``PgServer`` over the node's query layer, with its settings.

``serving/main.py`` starts it on the node's loop before HTTP serves (``--sql-port``;
0: none) and the node closes it first when it stops. TLS is the HTTP API's: with
``--tls-cert-file`` the SQL port takes TLS connections only. Its SQL workers spill into
``.sql-spill`` in the node's own state folder (``<state-dir>/<node>``), emptied here at
start.
"""

from __future__ import annotations

from streamiq.config import Settings
from streamiq.serving.node import state_path
from streamiq.serving.query.run import Queries
from streamiq.serving.sql.adapter import NodeEngine
from streamiq.serving.sql.execute import Limits
from streamiq.serving.sql.pool import SqlWorkers
from streamiq.serving.sql.server import PgServer, ServerBounds
from streamiq.tls import server_context

__all__ = ["bounds_of", "start_sql"]

SPILL_FOLDER = ".sql-spill"  # no view is named so (view names start with a letter, digit or _)


def bounds_of(s: Settings) -> ServerBounds:
    return ServerBounds(
        max_connections=s.sql_max_connections, max_per_address=s.sql_max_per_address,
        max_startups=s.sql_max_startups, startup_timeout_s=s.sql_startup_timeout_s,
        idle_timeout_s=s.sql_idle_timeout_s, statement_timeout_s=s.sql_statement_timeout_s,
        max_message_bytes=s.sql_max_statement_bytes + 1024, max_in_list=s.sql_max_in_list)


def workers_of(s: Settings) -> SqlWorkers:
    spill = state_path(s.state_dir, s.endpoint) / SPILL_FOLDER
    return SqlWorkers(s.sql_workers, memory_mb=s.sql_memory_mb, spill_dir=spill,
                      spill_mb=s.sql_spill_mb, max_queued=s.sql_max_queued,
                      log_level=s.log_level, log_format=s.log_format,
                      imports=(s.views_module,) if s.views_module else ())


async def start_sql(s: Settings, queries: Queries) -> PgServer | None:
    """Listen on ``--sql-port`` (None when it is 0)."""
    if not s.sql_port:
        return None
    engine = NodeEngine(queries, queries.coordinator.gate.auth)
    server = PgServer(engine, engine.authenticate, tls=server_context(s), bounds=bounds_of(s),
                      limits=Limits(s.sql_max_rows, s.sql_max_gather), workers=workers_of(s))
    await server.start(s.host, s.sql_port)
    return server
