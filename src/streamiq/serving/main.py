"""The composition root of a serving node: builds its parts and runs the process.

``run_node`` wires the node's state (``serving/node.py``), its HTTP app
(``serving/app.py``) and the uvicorn protocol that speaks HTTP, the lean path and the
lookup wire (``serving/protocol.py``), then serves until SIGINT/SIGTERM or a fatal
failure. Nothing imports this module but the command line.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import uvicorn

from streamiq.config import Settings
from streamiq.serving.app import create_asgi
from streamiq.serving.logs import configure_logging
from streamiq.serving.node import Node
from streamiq.serving.protocol import node_protocol

__all__ = ["FATAL_EXIT_GRACE_S", "run_node"]

log = logging.getLogger("streamiq.node")


#: After a fatal failure, the clean shutdown gets this long before the process is ended.
FATAL_EXIT_GRACE_S = 20.0


def _force_exit() -> None:
    log.critical("shutdown after a fatal failure did not finish in %.0fs: exiting now",
                 FATAL_EXIT_GRACE_S)
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def run_node(settings: Settings) -> None:
    """Serve one node until SIGINT/SIGTERM (uvicorn handles both) or a fatal failure.

    On a fatal failure (a part of the node that cannot recover, see ``Node._fatal``) the
    server is asked to exit (``should_exit``, checked by uvicorn's main loop every 0.1 s,
    safe to set from any thread); uvicorn then stops accepting, finishes in-flight
    requests, runs the lifespan shutdown (clients closed, stores closed, so RocksDB is
    left clean) and returns, and the process exits with status 1 for its supervisor to
    restart it. That clean path is preferred over ``os._exit`` at the failure: RocksDB
    and the Kafka clients get closed, logs get flushed. ``os._exit(1)`` is only the
    backstop when that shutdown hangs (a thread stuck in a native call) for
    ``FATAL_EXIT_GRACE_S``: a failed node must never linger half-alive.
    """
    configure_logging(settings.log_level)
    node = Node(settings)
    app = create_asgi(settings, node)
    print(f"streamiq node {settings.endpoint} listening on http://{settings.host}:{settings.port}",
          flush=True)
    # proxy_headers=False: NodeHttpProtocol's lean path needs LeanLookups as the app itself
    server = uvicorn.Server(uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning",
        http=node_protocol(), access_log=False, lifespan="on", proxy_headers=False,
        timeout_graceful_shutdown=5))

    def fatal() -> None:
        server.should_exit = True
        watchdog = threading.Timer(FATAL_EXIT_GRACE_S, _force_exit)
        watchdog.daemon = True
        watchdog.start()

    node.on_fatal = fatal
    server.run()
    if node.failed is not None:
        log.critical("node %s exiting with status 1: %s could not recover",
                     settings.endpoint, node.failed)
        logging.shutdown()
        sys.exit(1)
    if not server.started:
        sys.exit(3)  # as uvicorn.run does when the startup failed
