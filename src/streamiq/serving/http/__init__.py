"""A node's HTTP edge: what runs for each client or peer request that arrives.

The node's own HTTP server on httptools (``server.py`` its lifecycle, ``protocol.py`` a
connection, ``asgi.py`` one request served as ASGI) with the request limits and the lean
key-lookup path (``http_limits.py``, ``fastpath.py``), the FastAPI app and its routes
(``app.py``, ``queries.py``, ``answers.py``, ``params.py``, ``paths.py``), what a
token may see (``visible.py``), the node's metrics (``metrics.py``) and the dashboard
(``dashboard/``).
It calls ``cluster/`` to carry a request elsewhere and ``engines/`` to compute answers.
"""

__all__: list[str] = []
