"""The node's SQL port: a ``PgServer`` over the node's query layer, with its settings.

``serving/main.py`` starts it on the node's loop before uvicorn serves (``--sql-port``;
0: none) and the node closes it first when it stops. TLS is the HTTP API's: with
``--tls-cert-file`` the SQL port takes TLS connections only.
"""

from __future__ import annotations

import ssl

from streamiq.config import Settings
from streamiq.serving.query.run import Queries
from streamiq.serving.sql.adapter import NodeEngine
from streamiq.serving.sql.execute import Limits
from streamiq.serving.sql.server import PgServer

__all__ = ["server_context", "start_sql"]


def server_context(s: Settings) -> ssl.SSLContext | None:
    """The node's certificate for its SQL clients (None: plain TCP)."""
    if s.tls_cert_file is None or s.tls_key_file is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(s.tls_cert_file), str(s.tls_key_file))
    return ctx


async def start_sql(s: Settings, queries: Queries) -> PgServer | None:
    """Listen on ``--sql-port`` (None when it is 0)."""
    if not s.sql_port:
        return None
    engine = NodeEngine(queries, queries.coordinator.gate.auth)
    server = PgServer(engine, engine.authenticate, tls=server_context(s),
                      max_connections=s.sql_max_connections,
                      limits=Limits(s.sql_max_rows, s.sql_max_gather),
                      statement_timeout_s=s.sql_statement_timeout_s)
    await server.start(s.host, s.sql_port)
    return server
