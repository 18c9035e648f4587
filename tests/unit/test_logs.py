"""Log lines: JSON objects for machines, text for people."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from streamiq import logs


def _emit(monkeypatch: pytest.MonkeyPatch, fmt: str, tty: bool) -> str:
    err = io.StringIO()
    err.isatty = lambda: tty  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stderr", err)  # what logs reads
    logs.configure_logging("info", fmt)
    log = logging.getLogger("streamiq.test")
    log.info("members: joined %s; %d live", "127.0.0.1:2", 2, extra={"view": "balances"})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    logging.getLogger("py4j").info("not shown: other libraries log at WARNING")
    return err.getvalue()


def test_json_lines_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _emit(monkeypatch, "auto", tty=False).splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "streamiq.test"
    assert first["msg"] == "members: joined 127.0.0.1:2; 2 live"
    assert first["view"] == "balances" and first["ts"].endswith("Z")
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc"]


def test_text_on_a_terminal_or_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for fmt, tty in (("auto", True), ("text", False)):
        out = _emit(monkeypatch, fmt, tty)
        assert " INFO streamiq.test members: joined 127.0.0.1:2; 2 live" in out
        assert not out.startswith("{")
    assert _emit(monkeypatch, "json", tty=True).startswith("{")
