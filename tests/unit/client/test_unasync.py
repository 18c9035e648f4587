"""client/sync.py is generated from client/aio.py (scripts/unasync.py), not kept by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "unasync.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sync_client_is_what_unasync_generates() -> None:
    unasync = load()
    generated = unasync.unasync(unasync.SOURCE.read_text())
    assert unasync.TARGET.read_text() == generated, (
        "client/sync.py differs from what scripts/unasync.py generates from client/aio.py: "
        "edit aio.py, then run python scripts/unasync.py")


def test_unasync_rewrites_async_spellings() -> None:
    unasync = load()
    src = ('class AsyncClient:\n'
           '    async def get(self, a: int,\n'
           '                  b: int) -> AsyncIterator[int]:\n'
           '        v = (await self._http.get(f"x{a}")).json()\n'
           '        async with x as y:\n'
           '            await self._http.aclose()\n')
    assert unasync.rewrite(src) == ('class Client:\n'
                   '    def get(self, a: int,\n'
                   '            b: int) -> Iterator[int]:\n'
                   '        v = self._http.get(f"x{a}").json()\n'
                   '        with x as y:\n'
                   '            self._http.close()\n')
