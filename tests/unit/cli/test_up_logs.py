"""``streamiq up`` reads its children's logs through pipes and relays them to its stdout
with a prefix: they log the way that is read, unless told otherwise."""

from __future__ import annotations

import io

import pytest

from streamiq.cli import up
from streamiq.config import Settings


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("tty", "fmt", "child"), [
    (True, "auto", "text"),  # a person reads up's relay: readable lines
    (False, "auto", "json"),  # a collector reads it: JSON lines, prefixed
    (True, "json", "json"), (False, "text", "text")])  # an explicit choice is kept
def test_children_log_as_ups_output_is_read(
        monkeypatch: pytest.MonkeyPatch, tty: bool, fmt: str, child: str) -> None:
    monkeypatch.setattr("sys.stdout", _Tty() if tty else io.StringIO())  # where up relays
    argv = up._common(Settings(log_format=fmt))
    assert argv[argv.index("--log-format") + 1] == child
