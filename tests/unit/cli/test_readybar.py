"""The bar streamiq up shows while its parts start: what it says, when it goes away."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from streamiq.cli.readybar import ReadyBar


@dataclass
class Part:
    name: str
    ever_ready: bool = False


def test_waiting_names_the_parts_not_yet_ready() -> None:
    parts = [Part("ingest", True), Part("pipeline"), Part("node:9001")]
    assert ReadyBar.waiting(parts) == ", waiting for pipeline, node:9001"
    assert ReadyBar.waiting([Part("a", True)]) == ""


def test_bar_goes_away_once_every_part_was_ready(capsys: pytest.CaptureFixture[str]) -> None:
    parts = [Part("ingest"), Part("pipeline")]
    with ReadyBar(parts, threading.Lock(), enabled=True) as bar:
        bar.tick(parts)
        assert bar._progress is not None
        parts[0].ever_ready = parts[1].ever_ready = True
        bar.tick(parts)
        assert bar._progress is None
        print("streamiq: after")
    assert capsys.readouterr().out.endswith("streamiq: after\n")


def test_no_bar_unless_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    parts = [Part("ingest")]
    with ReadyBar(parts, threading.Lock(), enabled=False) as bar:
        bar.tick(parts)
        print("line")
    assert capsys.readouterr().out == "line\n"
