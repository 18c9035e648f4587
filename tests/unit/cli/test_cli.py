from __future__ import annotations

import pytest

from streamiq.cli.main import COMMANDS, build_parser, main, settings_from_args
from streamiq.config import Settings


def _settings(argv: list[str]) -> Settings:
    args = build_parser().parse_args(argv)
    return settings_from_args(args, COMMANDS[args.command][1])


def test_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_PORT", "9100")
    assert _settings(["node", "--no-auth"]).port == 9100
    assert _settings(["node", "--no-auth", "--port", "9200"]).port == 9200


def test_the_store_is_a_flag_and_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings(["node", "--no-auth"]).store == "rocksdb"
    monkeypatch.setenv("STREAMIQ_STORE", "memory")
    assert _settings(["node", "--no-auth"]).store == "memory"
    assert _settings(["node", "--no-auth", "--store", "rocksdb"]).store == "rocksdb"


def test_bad_flag_value_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="--port"):
        _settings(["node", "--port", "nope"])
    with pytest.raises(SystemExit, match="--bootstrap-servers"):
        _settings(["node", "--bootstrap-servers", "no-port"])


def test_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_MAX_LAG", "-1")
    with pytest.raises(SystemExit, match="STREAMIQ_MAX_LAG"):
        _settings(["node"])


def test_a_node_or_ingest_with_auth_on_needs_its_secrets(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    for var in ("STREAMIQ_JWT_SECRET", "STREAMIQ_API_KEYS", "STREAMIQ_CLUSTER_SECRET",
                "STREAMIQ_AUTH"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit, match="--jwt-secret nor --api-keys"):
        _settings(["node"])
    with pytest.raises(SystemExit, match="--cluster-secret"):
        _settings(["node", "--jwt-secret", "s" * 32])
    with pytest.raises(SystemExit, match="--jwt-secret nor --api-keys"):
        _settings(["ingest"])
    assert _settings(["ingest", "--api-keys", '{"k": "ingest"}']).api_keys == {"k": "ingest"}
    with pytest.raises(SystemExit, match="--api-keys"):
        _settings(["ingest", "--api-keys", "{not json"])


def test_kafka_passthrough_and_secret() -> None:
    s = _settings(["node", "--no-auth", "--kafka-config", '{"security.protocol": "SASL_SSL"}'])
    assert s.kafka()["security.protocol"] == "SASL_SSL"
    with pytest.raises(SystemExit, match="--kafka-config"):
        _settings(["node", "--kafka-config", "{not json"])


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [None, "up", "broker", "ingest", "pipeline", "node",
                                     "status", "query", "load"])
def test_help_is_plain_text(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([command] if command else [], capsys)
    for artefact in ("``", ":class:", "PosixPath", "default None", "default False",
                     "default True", "default ''"):
        assert artefact not in text, (artefact, text)


def test_top_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([], capsys)
    assert text.splitlines()[2].startswith("streamiq: queryable state")
    for command in ("up", "broker", "ingest", "pipeline", "node", "status", "query", "load"):
        assert f"\n    {command} " in text


def test_help_shows_defaults_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(["node"], capsys).split())
    assert "[env STREAMIQ_STATE_DIR; default .streamiq/state]" in text
    assert "[env STREAMIQ_ADVERTISED; default unset]" in text
    assert "[env STREAMIQ_REDIRECT; default off]" in text
    assert "[env STREAMIQ_TOPIC_PREFIX; default empty]" in text
    assert "[env STREAMIQ_KAFKA_CONFIG; default {}]" in text


@pytest.mark.parametrize(("argv", "line"), [
    (["node", "--port", "nope"], "streamiq: error: --port: Input should be a valid integer"),
    (["node", "--store", "lmdb"], "streamiq: error: --store: Input should be 'rocksdb' or "
                                  "'memory'"),
    (["up", "--partitions", "0"], "streamiq: error: --partitions: Input should be greater"),
    (["ingest", "--kafka-config", "[1]"], "streamiq: error: --kafka-config: Input should be"),
    (["node", "--tls-cert-file", "/no/cert.pem", "--tls-key-file", "/etc/hostname"],
     "streamiq: error: --tls-cert-file: no such file: /no/cert.pem\n"),
    (["ingest", "--tls-cert-file", "/etc/hostname"],
     "streamiq: error: --tls-cert-file and --tls-key-file go together\n"),
])
def test_bad_flag_exits_2_with_one_line(argv: list[str], line: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_unknown_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["status", "--nodes", "x:1"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --nodes x:1" in capsys.readouterr().err
