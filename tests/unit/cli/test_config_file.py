"""streamiq --config FILE: TOML settings, a table per command, flags and env win."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamiq.cli.main import COMMANDS, build_parser, main, settings_from_args

FILE = """\
bootstrap_servers = "10.0.0.5:9092,10.0.0.6:9092"
cluster = "prod"
port = 9100
ingest_port = 8181

[node]
host = "0.0.0.0"
advertised = "node-1.streamiq.svc:9001"
port = 9001

[node.kafka_config]
"security.protocol" = "SASL_SSL"

[pipeline]
master = "spark://10.0.0.7:7077"
"""


def _settings(argv: list[str]):  # type: ignore[no-untyped-def]
    args = build_parser().parse_args(argv)
    return settings_from_args(args, COMMANDS[args.command][1])


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("BOOTSTRAP_SERVERS", "CLUSTER", "PORT", "HOST", "CONFIG"):
        monkeypatch.delenv(f"STREAMIQ_{name}", raising=False)
    path = tmp_path / "streamiq.toml"
    path.write_text(FILE)
    return path


def test_top_level_for_every_command_and_a_table_per_command(conf: Path) -> None:
    node = _settings(["node", "--config", str(conf), "--no-auth"])
    assert node.bootstrap_servers == "10.0.0.5:9092,10.0.0.6:9092" and node.cluster == "prod"
    assert (node.host, node.port, node.advertised) == ("0.0.0.0", 9001,
                                                      "node-1.streamiq.svc:9001")
    assert node.kafka_config == {"security.protocol": "SASL_SSL"}
    ingest = _settings(["ingest", "--config", str(conf), "--no-auth"])
    assert ingest.ingest_port == 8181 and ingest.kafka_config == {}  # [node] is not its own
    assert _settings(["pipeline", "--config", str(conf)]).master == "spark://10.0.0.7:7077"


def test_a_flag_then_the_environment_win_over_the_file(conf: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_CLUSTER", "from-env")
    s = _settings(["node", "--config", str(conf), "--no-auth", "--port", "9555"])
    assert (s.port, s.cluster, s.host) == (9555, "from-env", "0.0.0.0")
    monkeypatch.setenv("STREAMIQ_CONFIG", str(conf))  # the file from the environment too
    assert _settings(["node", "--no-auth"]).host == "0.0.0.0"


@pytest.mark.parametrize(("text", "message"), [
    ("prt = 1\n", "unknown setting 'prt'"),
    ("[node]\nprt = 1\n", "unknown setting 'prt' in [node]"),
    ("[nod]\nport = 1\n", "[nod] is no command"),
    ("port = [\n", "not TOML"),
    ('[node]\nport = "nope"\n', ": port: Input should be a valid integer"),
])
def test_bad_files_are_one_line_naming_file_and_key(
        tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["node", "--config", str(path), "--no-auth"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("streamiq: error: ") and str(path) in err and message in err
    assert err.count("\n") == 1


def test_a_missing_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--config", str(tmp_path / "nope.toml")])
    assert "nope.toml: cannot read" in capsys.readouterr().err
