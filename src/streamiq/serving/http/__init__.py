"""A node's HTTP edge: what runs for each client or peer request that arrives.

uvicorn's protocol with the request limits and the lean key-lookup path
(``protocol.py``, ``http_limits.py``, ``fastpath.py``), the FastAPI app and its routes
(``app.py``, ``queries.py``, ``answers.py``, ``params.py``, ``paths.py``), what a
token may see (``visible.py``), the node's metrics (``metrics.py``) and the dashboard.
It calls ``cluster/`` to carry a request elsewhere and ``engines/`` to compute answers.
"""

__all__: list[str] = []
