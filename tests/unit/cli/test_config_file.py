"""streamiq --config FILE: TOML settings, a table per command, flags and env win."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from streamiq.cli.configfile import client_settings, file_settings
from streamiq.cli.main import COMMANDS, build_parser, main, settings_from_args
from streamiq.config import Settings

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


def _settings(argv: list[str]) -> Settings:
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


def test_a_node_bound_to_every_interface_must_say_where_peers_reach_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STREAMIQ_ADVERTISED", raising=False)
    monkeypatch.delenv("STREAMIQ_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["node", "--no-auth", "--host", "0.0.0.0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0 binds every interface" in err and "--advertised" in err
    s = _settings(["node", "--no-auth", "--host", "0.0.0.0", "--advertised", "10.0.0.11:9001"])
    assert s.endpoint == "10.0.0.11:9001"


def test_up_advertises_loopback_for_nodes_bound_to_every_interface() -> None:
    from streamiq.cli.up import _parts

    s = _settings(["up", "--no-auth", "--host", "0.0.0.0", "--bootstrap-servers", "k:9092"])
    nodes = [p for p in _parts(s, 2, 9001) if p.name.startswith("node")]
    argv = nodes[1].argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--advertised") + 1] == "127.0.0.1:9002"


CLIENT_FILE = """\
bootstrap_servers = "10.0.0.5:9092"

[client]
node = "10.0.0.11:9001,10.0.0.12:9001"
ingest = "10.0.0.11:8080"
token = "from-file"
"""


@pytest.fixture
def client_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NODE", "INGEST", "TOKEN", "CONFIG"):  # main() sets them from the file:
        monkeypatch.setenv(f"STREAMIQ_{name}", "")  # recorded, so undone after the test
        monkeypatch.delenv(f"STREAMIQ_{name}")
    return monkeypatch


def _client_args(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, object]:
    """What status/query/load would run with (their run() replaced)."""
    from streamiq.cli import main as cli_main
    from streamiq.cli.common import auth_headers

    seen: dict[str, object] = {}

    def run(args: argparse.Namespace) -> int:
        seen.update(vars(args), headers=auth_headers(args))
        return 0

    for module in cli_main.CLIENTS.values():
        monkeypatch.setattr(module, "run", run)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return seen


def test_client_commands_read_the_client_table(tmp_path: Path,
                                               client_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CLIENT_FILE)
    got = _client_args(client_env, ["status", "--config", str(path)])
    assert got["node"] == "10.0.0.11:9001,10.0.0.12:9001"
    assert got["headers"] == {"authorization": "Bearer from-file"}
    got = _client_args(client_env, ["load", "bank", "--config", str(path), "--count", "1"])
    assert got["ingest"] == "10.0.0.11:8080"
    # a flag, then the environment, win over the file
    client_env.setenv("STREAMIQ_NODE", "10.0.0.99:9001")
    client_env.setenv("STREAMIQ_CONFIG", str(path))
    assert _client_args(client_env, ["status"])["node"] == "10.0.0.99:9001"
    got = _client_args(client_env, ["query", "balances", "1", "--node", "10.0.0.98:9001",
                                    "--token", "from-flag"])
    assert got["node"] == "10.0.0.98:9001"
    assert got["headers"] == {"authorization": "Bearer from-flag"}


@pytest.mark.parametrize(("text", "message"), [
    ('[client]\nnodes = "a:1"\n', "unknown key 'nodes' in [client]"),
    ('[client]\nnode = "nohost"\n', "client.node: expected host:port"),
    ("[client]\ningest = 8080\n", "client.ingest: expected a string"),
    ('prt = 1\n[client]\nnode = "a:1"\n', "unknown setting 'prt'"),
])
def test_bad_client_tables_are_one_line_naming_file_and_key(
        tmp_path: Path, text: str, message: str, client_env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["status", "--config", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("streamiq: error: --config: ") and str(path) in err
    assert message in err and err.count("\n") == 1


def test_servers_ignore_the_client_table_but_check_it(tmp_path: Path,
                                                      client_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CLIENT_FILE)
    assert _settings(["ingest", "--config", str(path), "--no-auth"]).bootstrap_servers \
        == "10.0.0.5:9092"
    path.write_text('[client]\nnode = "x"\n')
    with pytest.raises(SystemExit):
        _settings(["ingest", "--config", str(path), "--no-auth"])


def _toml_blocks() -> list[tuple[str, str]]:
    root = Path(__file__).resolve().parents[3]
    docs = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [(f"{doc.relative_to(root)}#{i}", block)
            for doc in docs
            for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S))]


@pytest.mark.parametrize(("where", "text"), _toml_blocks(), ids=lambda v: v[:20])
def test_the_documented_config_files_are_accepted(where: str, text: str, tmp_path: Path,
                                                  client_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(text)
    for command in ("node", "ingest", "pipeline"):
        Settings(**file_settings(path, command, COMMANDS[command][1], COMMANDS))
    client_settings(path, COMMANDS)
