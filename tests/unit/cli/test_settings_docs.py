"""Every setting is documented where a person looks (the Configuration page's table,
docs/configuration.md: its flag and its environment variable), and the CLI messages
docs/design.md's "Settings" section cites, as the reason argparse stays, are still the
ones it gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamiq.cli.main import COMMANDS, main
from streamiq.config import Settings

CONFIGURATION = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
FLAGGED = {name for _, fields in COMMANDS.values() for name in fields}


def _configuration_table() -> str:
    text = CONFIGURATION.read_text()
    start = text.index("| flag | env |")
    end = text.find("\n\n", start)  # the table ends the page, or a paragraph follows
    return text[start:end if end != -1 else len(text)]


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_in_the_configuration_table(name: str) -> None:
    table = _configuration_table()
    assert f"`STREAMIQ_{name.upper()}`" in table  # spelled out, not `_PORT`
    if name in FLAGGED:  # kafka_password is read from the environment only
        assert f"`--{name.replace('_', '-')}`" in table
    assert Settings.model_fields[name].description  # what --help says of it


@pytest.mark.parametrize(("argv", "line"), [
    (["up", "--restart-max-s", "-1"],
     "streamiq: error: --restart-max-s: Input should be greater than or equal to 1\n"),
    (["node", "--port", "banana"], "streamiq: error: --port: Input should be a valid "
                                   "integer, unable to parse string as an integer\n"),
    (["token", "--scope", "views:*", "--ttl", "banana"],
     "streamiq token: error: argument --ttl: expected a duration such as 90s, 15m, 24h or "
     "7d, got 'banana'\n"),
    (["node", "--port"], "streamiq node: error: argument --port: expected one argument\n"),
    (["node", "--prot", "9001"], "streamiq: error: unrecognized arguments: --prot 9001\n"),
    (["token", "--ttl", "1h"],
     "streamiq token: error: the following arguments are required: --scope\n"),
], ids=["restart-max-s", "port", "ttl", "no-value", "unknown", "required"])
def test_the_messages_design_md_cites(argv: list[str], line: str,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STREAMIQ_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.endswith(line)
