"""The query layer: typed queries run through the coordinator, no web framework.

A front end (the HTTP routes of ``serving/http/``, or SQL over the PostgreSQL wire)
parses its request into a typed query (``model.py``: a view, the query's parameters and
its ``Freshness``), calls ``Queries`` (``run.py``) and renders the typed result it gets
back. Placement, forwarding, scatter-gather to owners, position waits and partial
results happen here, below any front end; what a peer is asked is rendered from the
typed query (``codec.py``).
"""

__all__: list[str] = []
