"""Address flags of the client commands: checked at parse time, the env var as default."""

from __future__ import annotations

import argparse

import pytest

from streamiq.cli.common import parse_addresses
from streamiq.cli.main import build_parser, main


@pytest.mark.parametrize(("raw", "several", "expected"), [
    ("localhost:9001", False, "localhost:9001"),
    ("http://127.0.0.1:9002/", False, "127.0.0.1:9002"),
    (" a:1 , https://b:2", True, "a:1,b:2"),
    ("[::1]:9001", False, "[::1]:9001"),
])
def test_addresses_are_normalised(raw: str, several: bool, expected: str) -> None:
    assert parse_addresses(raw, several) == expected


@pytest.mark.parametrize(("raw", "several"), [
    ("nope", True), (":", True), ("host:", True), ("bad host:1", True), ("h:99999", True),
    ("h:0", True), ("a:1,b:2", False), ("a:1,", True), ("h:x", True),
])
def test_malformed_addresses_are_refused(raw: str, several: bool) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        parse_addresses(raw, several)


@pytest.mark.parametrize(("argv", "message"), [
    (["status", "--node", "h:99999"], "argument --node: expected host:port, got 'h:99999'"),
    (["query", "v", "k", "--node", "bad host:1"], "argument --node: expected host:port"),
    (["load", "bank", "--ingest", "a:1,b:2"], "argument --ingest: expected one host:port"),
])
def test_bad_address_is_a_usage_error(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_bad_env_address_names_the_variable_and_spares_other_commands(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STREAMIQ_NODE", "nope")
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["status"])
    assert exc.value.code == 2
    assert "got 'nope' (from STREAMIQ_NODE)" in capsys.readouterr().err
    assert build_parser().parse_args(["status", "--node", "h:1"]).node == "h:1"
    assert build_parser().parse_args(["node"]).command == "node"
