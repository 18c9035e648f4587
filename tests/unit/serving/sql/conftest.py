"""The SQL front end's shared fixture: a PgServer over the example views' rows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlfake import FakeEngine, ServerThread, balances, order_counts
from sqlviews import VIEWS

ROWS = {"balances": balances(), "order_counts": order_counts()}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    """A PgServer on its own loop's thread, serving balances and order_counts."""
    srv = ServerThread(FakeEngine(list(VIEWS.values()), ROWS))
    yield srv
    srv.stop()
