"""client/sync.py is what the ``unasync`` package generates from client/aio.py.

The rule below is the one place it is written down; ``make unasync`` (this file run as a
script) rewrites sync.py with it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import unasync

CLIENT = Path(__file__).resolve().parents[3] / "src" / "streamiq" / "client"
SOURCE, TARGET = CLIENT / "aio.py", CLIENT / "sync.py"

#: unasync's own renames (``__aenter__``, ``AsyncIterator``, ``AsyncGenerator``...) and
#: these; ``async``/``await`` are dropped
RULE = unasync.Rule("aio.py", "sync.py", additional_replacements={
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aiter_lines": "iter_lines",
    "aread": "read",
    "_asleep": "_sleep",
})


def generate(source: Path, into: Path) -> str:
    """The text unasync writes for ``source`` (run on a copy in the folder ``into``)."""
    copy = into / "aio.py"
    shutil.copyfile(source, copy)
    unasync.unasync_files([str(copy)], [RULE])
    return (into / "sync.py").read_text()


def test_sync_client_is_what_unasync_generates(tmp_path: Path) -> None:
    assert TARGET.read_text() == generate(SOURCE, tmp_path), (
        "client/sync.py differs from what unasync generates from client/aio.py: "
        "edit aio.py, then run make unasync")


def test_unasync_rewrites_async_spellings(tmp_path: Path) -> None:
    source = tmp_path / "src.py"
    source.write_text('class AsyncClient:\n'
                      '    async def get(\n'
                      '            self, a: int) -> AsyncIterator[int]:\n'
                      '        r = await self._http.get(f"x{a}")\n'
                      '        async with x as y:\n'
                      '            await self._http.aclose()\n'
                      '        return r.json()\n')
    (tmp_path / "out").mkdir()
    assert generate(source, tmp_path / "out") == ('class Client:\n'
                                                  '    def get(\n'
                                                  '            self, a: int) -> Iterator[int]:\n'
                                                  '        r = self._http.get(f"x{a}")\n'
                                                  '        with x as y:\n'
                                                  '            self._http.close()\n'
                                                  '        return r.json()\n')


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        TARGET.write_text(generate(SOURCE, Path(tmp)))
    print(f"wrote {TARGET}", file=sys.stderr)
