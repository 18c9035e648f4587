"""``--config FILE``: settings from a TOML file, for every part.

Keys are setting names (the flags without ``--``, with ``_``: ``bootstrap_servers``),
at the top level for every command, and in a table per command (``[node]``,
``[ingest]``, ``[pipeline]``, ``[up]``, ``[broker]``) overriding the top level for that
command. Precedence: a flag, then the environment (``STREAMIQ_<NAME>``), then the
file, then the default. One file can describe a host's parts; keys a command does not
take are ignored by it, keys that are no setting at all are an error::

    bootstrap_servers = "kafka-1:9092,kafka-2:9092"
    cluster = "prod"

    [node]
    host = "0.0.0.0"
    advertised = "10.0.0.11:9001"
    state_dir = "/var/lib/streamiq"

    [node.kafka_config]
    "security.protocol" = "SASL_SSL"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streamiq.config import Settings

__all__ = ["ENV", "ConfigFileError", "file_settings"]

ENV = "STREAMIQ_CONFIG"


class ConfigFileError(ValueError):
    """The file cannot be read or names something that is no setting (says which)."""


def file_settings(path: str | os.PathLike[str], command: str, fields: Iterable[str],
                  commands: Iterable[str]) -> dict[str, Any]:
    """The file's values for ``command``'s ``fields`` that neither a flag nor the
    environment sets (the caller removes flags): ``{name: value}``."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: not TOML: {exc}") from None
    tables = set(commands)
    merged: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict) and key not in Settings.model_fields:  # a command's table
            if key not in tables:
                raise ConfigFileError(f"{path}: [{key}] is no command (one of "
                                      f"{', '.join(sorted(tables))})")
            for k in value:
                _checked(path, k, key)
            continue
        merged[_checked(path, key, None)] = value
    section = doc.get(command)
    if isinstance(section, dict) and command not in Settings.model_fields:
        merged.update(section)
    wanted = set(fields)
    return {k: v for k, v in merged.items()
            if k in wanted and f"STREAMIQ_{k.upper()}" not in os.environ}


def _checked(path: str | os.PathLike[str], key: str, table: str | None) -> str:
    if key not in Settings.model_fields:
        where = f" in [{table}]" if table else ""
        raise ConfigFileError(f"{path}: unknown setting {key!r}{where}")
    return key
