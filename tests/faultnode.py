"""Faults tests install into ``streamiq.serving.changelog.materializer.before_apply``.

In a test's own process:
``monkeypatch.setattr("streamiq.serving.changelog.materializer.before_apply",
KeyFault(b"poison", 2))``. In a node process, this file is the launcher, put before the
command line through the procs fixture's ``prefix`` (``launcher(key, times)``)::

    python tests/faultnode.py <key> <times> -- <python> -m streamiq <command> <args...>

It installs the fault, then runs ``streamiq.cli.main`` with ``<command> <args...>`` in
the same process. ``<times>`` 0: every time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["KeyFault", "launcher"]


class KeyFault:
    """Raises on a poll that fetched a record with ``key``, at most ``times`` times
    (0: every time); it stands for a bug or an I/O error in the materializer."""

    def __init__(self, key: bytes, times: int = 0) -> None:
        self.key = key
        self.left = times or -1

    def __call__(self, msgs: list[Any]) -> None:
        if self.left != 0 and any(m.key() == self.key for m in msgs):
            self.left -= 1
            raise RuntimeError(f"injected fault on key {self.key!r}")


def launcher(key: str, times: int = 0) -> list[str]:
    """The process prefix that runs a streamiq command with a ``KeyFault`` installed."""
    return [sys.executable, str(Path(__file__).resolve()), key, str(times), "--"]


USAGE = "usage: faultnode.py <key> <times> -- <python> -m streamiq <command> <args...>"


def main(argv: list[str]) -> None:
    if len(argv) < 6 or argv[2] != "--" or argv[4:6] != ["-m", "streamiq"]:
        raise SystemExit(USAGE)
    key, times, _, *command = argv
    from streamiq.cli.main import main as streamiq
    from streamiq.serving.changelog import materializer

    materializer.before_apply = KeyFault(key.encode(), int(times))
    streamiq(command[3:])


if __name__ == "__main__":
    main(sys.argv[1:])
