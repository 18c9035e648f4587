"""The ingest service: validated writes to a view's input topic, each acknowledged with
the position token of its record (``topic:partition:offset``).

Writes are answered on the HTTP server's lean path (``lean.py``: token, limits, the body
checked field by field in ``records.py``, one produce in ``producer.py``); refusals and
everything else by the FastAPI app (``app.py``); ``metrics.py`` counts what it did.
"""
