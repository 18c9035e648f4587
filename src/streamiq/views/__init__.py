"""Views: what a pipeline publishes and a node serves. A ``View`` (``base.py``) is a key,
its partitioning and its columns; the built-in apps are ``bank.py`` and ``orders.py``;
the catalog the sink publishes (``catalog.py``, bounded by ``catalog_bounds.py`` and
``limits.py``) tells every node which views exist; ``rows.py`` checks each changelog row
against its view before it is stored.
"""
