"""A node's process loads the SQL engines only when it has a SQL port."""

from __future__ import annotations

import subprocess
import sys

SQL_ENGINES = ("duckdb", "pyarrow", "sqlglot", "pygwire")


def test_a_node_without_a_sql_port_imports_no_sql_engine() -> None:
    """They are a third of a node's start (~0.5 s of CPU): most nodes have no SQL port."""
    probe = ("import sys, streamiq.serving.main; "
             f"print(','.join(m for m in {SQL_ENGINES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def test_the_sql_port_loads_them() -> None:
    probe = ("import sys, streamiq.serving.sql.listen; "
             f"print(','.join(m for m in {SQL_ENGINES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out.split(",") == list(SQL_ENGINES)
