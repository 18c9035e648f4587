"""The settings of issue 15 (metrics and logs): flags, environment, defaults."""

from __future__ import annotations

import pytest

from streamiq.cli.main import COMMANDS, build_parser, settings_from_args
from streamiq.config import Settings


def _settings(argv: list[str]) -> Settings:
    args = build_parser().parse_args(argv)
    return settings_from_args(args, COMMANDS[args.command][1])


def test_defaults() -> None:
    s = Settings()
    assert s.metrics and s.metrics_port == 9400 and s.log_format == "auto"


def test_the_pipeline_takes_a_metrics_port_and_zero_turns_it_off() -> None:
    assert _settings(["pipeline", "--metrics-port", "9555"]).metrics_port == 9555
    assert _settings(["pipeline", "--metrics-port", "0"]).metrics_port == 0


@pytest.mark.parametrize("command", ["node", "ingest", "pipeline"])
def test_every_part_turns_metrics_off_and_picks_a_log_format(
        command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_AUTH", "false")
    assert not _settings([command, "--no-metrics", "--log-format", "json"]).metrics
    assert _settings([command, "--log-format", "json"]).log_format == "json"
    monkeypatch.setenv("STREAMIQ_METRICS", "false")
    monkeypatch.setenv("STREAMIQ_LOG_FORMAT", "text")
    s = _settings([command])
    assert not s.metrics and s.log_format == "text"


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log_format"):
        Settings(log_format="yaml")
