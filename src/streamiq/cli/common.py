"""What the client commands (status, query, load) share: address flags, errors, output.

An address flag reads its environment variable as its default, and its help says both,
like every setting flag. A :class:`CliError` is printed as one line and exits 1; the
commands raise it for anything a person should read instead of a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from streamiq._saved import find_token, saved_file

__all__ = ["CliError", "add_address", "add_token", "auth_headers", "cell", "console",
           "parse_addresses", "print_json", "reason", "rows_table", "saved_file"]


class CliError(Exception):
    """A failure said in one line (``streamiq: error: ...``); exit status 1."""


def add_address(p: argparse.ArgumentParser, flag: str, env: str, default: str,
                what: str, several: bool = False) -> None:
    """``--node HOST:PORT`` style flag whose default comes from ``env``; a malformed
    address (from the flag or the variable) is a usage error naming the flag."""
    from_env = os.environ.get(env)

    def parse(raw: str) -> str:
        try:
            return parse_addresses(raw, several)
        except argparse.ArgumentTypeError as exc:
            if raw == from_env:
                raise argparse.ArgumentTypeError(f"{exc} (from {env})") from None
            raise

    p.add_argument(flag, default=from_env or default, metavar="HOST:PORT", type=parse,
                   help=f"{what} [env {env}; default {default}]")


def add_token(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help="bearer token sent with every request [env STREAMIQ_TOKEN; default "
                        "the demo token 'streamiq up' saved in .streamiq/token]")


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    """The Authorization header: --token, else STREAMIQ_TOKEN, else the token file
    ``streamiq up`` wrote (next to STREAMIQ_STATE_DIR, default .streamiq/state)."""
    token, _ = find_token(getattr(args, "token", None))
    return {"authorization": f"Bearer {token}"} if token else {}


def parse_addresses(raw: str, several: bool = False) -> str:
    """``host:port[,host:port]`` checked and normalised (an ``http://`` prefix and a
    trailing slash are dropped)."""
    parts = [a.strip() for a in raw.split(",")]
    if len(parts) > 1 and not several:
        raise argparse.ArgumentTypeError(f"expected one host:port, got {raw!r}")
    out = []
    for part in parts:
        address = part.removeprefix("http://").removeprefix("https://").rstrip("/")
        host, sep, port = address.rpartition(":")
        if not sep or not host or any(c in host for c in " /") or not port.isdigit() \
                or not 1 <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"expected host:port, got {part!r}")
        out.append(f"{host}:{port}")
    return ",".join(out)


def reason(exc: Exception) -> str:
    """Why a request failed, in a few words."""
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.HTTPStatusError):
        if exc.response.status_code == 401:
            return ("answered HTTP 401: no valid token (give --token or set STREAMIQ_TOKEN; "
                    "'streamiq up' prints one)")
        if exc.response.status_code == 403:
            return "answered HTTP 403: the token may not do this"
        return f"answered HTTP {exc.response.status_code}"
    if isinstance(exc, ValueError):
        return "answered something that is not JSON"
    return str(exc) or type(exc).__name__


#: width of tables written to a pipe or file (a terminal's own width otherwise)
PIPE_WIDTH = 200


def console(stderr: bool = False) -> Console:
    """Output console: colours and live displays only on a terminal; never markup
    from data (cells are Text). Piped output is not folded at 80 columns."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c.width = PIPE_WIDTH
    return c


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> Text:
    """A table cell: plain text (``[x]`` in a key is shown, not taken for markup)."""
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no", style="green" if value else "red")
    if isinstance(value, float):
        return Text(f"{value:.6g}" if abs(value) < 1e15 else repr(value))
    if isinstance(value, dict | list):
        return Text(json.dumps(value, default=str))
    return Text(str(value))


def columns_of(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every column that appears, in first-seen order."""
    return list(dict.fromkeys(k for row in rows for k in row))


def rows_table(rows: Sequence[dict[str, Any]]) -> Table:
    """A table of dict rows, one column per key."""
    cols = columns_of(rows)
    table = Table(show_edge=False, pad_edge=False)
    for c in cols:
        numbers = all(isinstance(r.get(c), int | float | None) for r in rows)
        table.add_column(c, overflow="fold", justify="right" if numbers else "left")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in cols))
    return table
