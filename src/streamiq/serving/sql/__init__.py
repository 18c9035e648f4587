"""SQL on live views over the PostgreSQL wire protocol (issue 26).

``server`` (connections: startup, TLS, password = token, cancel, limits) hands each
connection to a ``session`` (simple and extended query protocol, SET/SHOW, prepared
statements), which plans with ``planner`` (sqlglot: lookups, scans and aggregates
pushed down), runs the plan through ``execute`` against an ``engine.Engine`` (the query
engines behind one small interface) and DuckDB (``duck``) for what is left, and answers
client catalog queries from ``catalog`` (empty tables shaped like the visible views).
"""
