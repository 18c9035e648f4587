"""Query engines over one node's stores, free of any transport (no FastAPI, no peers).

Range, prefix and window scans with their cursors (``scan.py``), group-by aggregates
(``aggregate.py``), the typed partial results nodes exchange in a scatter-gather
(``partials.py``) and the fast decoding of stored rows (``_json.py``). The query layer
(``serving/query/``) calls them for every front end (HTTP routes, SQL).
"""

__all__: list[str] = []
