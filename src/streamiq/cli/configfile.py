"""``--config FILE``: settings from a TOML file, for every part.

Keys are setting names (the flags without ``--``, with ``_``: ``bootstrap_servers``),
at the top level for every command, and in a table per command (``[node]``,
``[ingest]``, ``[pipeline]``, ``[up]``, ``[broker]``) overriding the top level for that
command. Precedence: a flag, then the environment (``STREAMIQ_<NAME>``), then the
file, then the default. One file can describe a host's parts; keys a command does not
take are ignored by it, keys that are no setting at all are an error. A ``[client]``
table gives the client commands (``status``, ``query``, ``load``) their addresses and
token: ``node``, ``ingest``, ``token``, each below its flag and environment variable
(``--node``/``STREAMIQ_NODE``, ...). YAML is not read: PyYAML is no dependency of
streamiq, and TOML needs none (``tomllib``)::

    bootstrap_servers = "kafka-1:9092,kafka-2:9092"
    cluster = "prod"

    [node]
    host = "0.0.0.0"
    advertised = "10.0.0.11:9001"
    state_dir = "/var/lib/streamiq"

    [node.kafka_config]
    "security.protocol" = "SASL_SSL"

    [client]
    node = "10.0.0.11:9001,10.0.0.12:9001"
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streamiq.cli.common import parse_addresses
from streamiq.config import Settings

__all__ = ["CLIENT", "ENV", "ConfigFileError", "client_settings", "file_settings"]

ENV = "STREAMIQ_CONFIG"

#: the ``[client]`` table's keys and the environment variable each stands in for
CLIENT = {"node": "STREAMIQ_NODE", "ingest": "STREAMIQ_INGEST", "token": "STREAMIQ_TOKEN"}


class ConfigFileError(ValueError):
    """The file cannot be read or names something that is no setting (says which)."""


def file_settings(path: str | os.PathLike[str], command: str, fields: Iterable[str],
                  commands: Iterable[str]) -> dict[str, Any]:
    """The file's values for ``command``'s ``fields`` that neither a flag nor the
    environment sets (the caller removes flags): ``{name: value}``."""
    doc = _load(path, commands)
    merged = {k: v for k, v in doc.items()
              if not isinstance(v, dict) or k in Settings.model_fields}
    section = doc.get(command)
    if isinstance(section, dict) and command not in Settings.model_fields:
        merged.update(section)
    wanted = set(fields)
    return {k: v for k, v in merged.items()
            if k in wanted and f"STREAMIQ_{k.upper()}" not in os.environ}


def client_settings(path: str | os.PathLike[str], commands: Iterable[str]
                    ) -> dict[str, str]:
    """The ``[client]`` table as ``{environment variable: value}``, for the variables not
    set (the whole file is checked, as for every command)."""
    table = _load(path, commands).get("client", {})
    return {CLIENT[k]: v for k, v in table.items() if CLIENT[k] not in os.environ}


def _load(path: str | os.PathLike[str], commands: Iterable[str]) -> dict[str, Any]:
    """The file, every key and table checked (:class:`ConfigFileError` naming the first
    that is wrong)."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: not TOML: {exc}") from None
    tables = {*commands, "client"}
    for key, value in doc.items():
        if key == "client" and isinstance(value, dict):
            for k, v in value.items():
                _client_value(path, k, v)
        elif isinstance(value, dict) and key not in Settings.model_fields:  # a command's
            if key not in tables:
                raise ConfigFileError(f"{path}: [{key}] is no command (one of "
                                      f"{', '.join(sorted(tables))})")
            for k in value:
                _checked(path, k, key)
        else:
            _checked(path, key, None)
    return doc


def _client_value(path: str | os.PathLike[str], key: str, value: Any) -> None:
    if key not in CLIENT:
        raise ConfigFileError(f"{path}: unknown key {key!r} in [client] (one of "
                              f"{', '.join(CLIENT)})")
    if not isinstance(value, str):
        raise ConfigFileError(f"{path}: client.{key}: expected a string, got {value!r}")
    if key != "token":
        try:
            parse_addresses(value, several=key == "node")
        except argparse.ArgumentTypeError as exc:
            raise ConfigFileError(f"{path}: client.{key}: {exc}") from None


def _checked(path: str | os.PathLike[str], key: str, table: str | None) -> str:
    if key not in Settings.model_fields:
        where = f" in [{table}]" if table else ""
        raise ConfigFileError(f"{path}: unknown setting {key!r}{where}")
    return key
