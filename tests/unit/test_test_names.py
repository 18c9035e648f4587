"""pytest imports test modules by their basename (rootdir mode, no packages), so two
test files of one name in different folders stop the whole run at collection (a
unit test of the query layer named like an integration test did, in a CI run)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_its_own_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("*.py")
                    if p.name.startswith("test_") or p.name == "conftest.py")
    clashes = {n: sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob(n))
               for n, k in names.items() if k > 1 and n != "conftest.py"}
    assert clashes == {}
