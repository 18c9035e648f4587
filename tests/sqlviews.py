"""The example views as SQL tables (serving/sql's ViewInfo), for the SQL front end's tests."""

from __future__ import annotations

from streamiq.serving.sql.engine import Column, ViewInfo

BALANCES = ViewInfo("balances", ("account",), (
    Column("account", "string"), Column("balance", "decimal(38,0)"), Column("count", "bigint")))
ORDER_COUNTS = ViewInfo("order_counts", ("store", "type"), (
    Column("store", "string"), Column("type", "string"), Column("count", "bigint"),
    Column("revenue", "double")))
VIEWS = {v.name: v for v in (BALANCES, ORDER_COUNTS)}
