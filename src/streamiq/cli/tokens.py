"""Tokens of a ``streamiq up``: the demo token it keeps fresh, and ``streamiq token``.

``up`` saves its JWT secret in ``jwt-secret`` beside the demo token (``token``, next to
the state directory, both mode 0600: readable by the owner only). The demo token reads
every view and writes through ingest; it expires after ``DEMO_TTL_S`` and ``up``
renews it (re-saving the file the CLI reads) once two thirds of that have passed.
``streamiq token --scope SCOPES --ttl TTL`` mints another token from the saved secret
(or STREAMIQ_JWT_SECRET), for a running ``up``.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamiq.auth import mint
from streamiq.cli.common import CliError, saved_file

__all__ = ["DEMO_TTL_S", "DemoToken", "add_parser", "parse_scope", "parse_ttl", "run",
           "write_private"]

DEMO_TTL_S = 24 * 3600.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MAX_TTL_S = 366 * 86400
_SCOPE = re.compile(r"ingest|views:(\*|[A-Za-z0-9_.-]+)")
HELP = "mint a token for a running 'streamiq up' (from the JWT secret it saved)"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by the owner only (0600), atomically: a
    reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # a leftover tmp file may have had another mode
        f.write(text)
    os.replace(tmp, path)


class DemoToken:
    """The demo token ``up`` saves in ``path``, renewed before it expires."""

    def __init__(self, secret: str, path: Path, ttl_s: float = DEMO_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.secret, self.path, self.ttl_s, self.clock = secret, path, ttl_s, clock
        self.token = ""
        self.expires_at = 0.0

    def issue(self) -> str:
        now = self.clock()
        self.token = mint(self.secret, subject="demo", scope="views:* ingest",
                          ttl_s=self.ttl_s, now=now)
        self.expires_at = now + self.ttl_s
        write_private(self.path, self.token + "\n")
        return self.token

    def due(self) -> bool:
        """Two thirds of the token's life have passed: time to issue a new one."""
        return self.clock() >= self.expires_at - self.ttl_s / 3


def parse_ttl(raw: str) -> float:
    """``90``, ``90s``, ``15m``, ``24h``, ``7d``: seconds, above 0 and at most a year."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", raw)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 15m, 24h or 7d, got {raw!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 < seconds <= _MAX_TTL_S:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 366d, got {raw!r}")
    return seconds


def parse_scope(raw: str) -> str:
    """Scopes separated by spaces or commas: ``views:NAME``, ``views:*``, ``ingest``."""
    words = [w for w in re.split(r"[\s,]+", raw) if w]
    bad = [w for w in words if not _SCOPE.fullmatch(w)]
    if not words or bad:
        raise argparse.ArgumentTypeError(
            f"expected scopes views:NAME, views:* or ingest (space- or comma-separated), "
            f"got {', '.join(map(repr, bad)) if bad else repr(raw)}")
    return " ".join(dict.fromkeys(words))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("token", help=HELP, description=(
        f"{HELP}. Prints the token. The secret is read from jwt-secret beside the state "
        "directory (STREAMIQ_STATE_DIR, default .streamiq/state), or STREAMIQ_JWT_SECRET "
        "when set."))
    p.add_argument("--scope", required=True, type=parse_scope, metavar="SCOPES",
                   help="what it may do: views:NAME (read one view), views:* (every view), "
                        "ingest (write); several separated by spaces or commas")
    p.add_argument("--ttl", default=3600.0, type=parse_ttl, metavar="DURATION",
                   help="how long it is valid: 90s, 15m, 24h, 7d [default 1h]")
    p.add_argument("--subject", default="cli", help="its sub claim [default cli]")
    p.set_defaults(check=None)


def _secret() -> str:
    given = os.environ.get("STREAMIQ_JWT_SECRET")
    if given:
        return given
    where = saved_file("jwt-secret")
    try:
        secret = where.read_text().strip()
    except OSError as exc:
        raise CliError(f"no JWT secret in {where} ({exc.strerror}): start 'streamiq up' "
                       "(with authentication on) first, or set STREAMIQ_JWT_SECRET") from None
    if not secret:
        raise CliError(f"{where} is empty: restart 'streamiq up'")
    return secret


def run(args: argparse.Namespace) -> int:
    print(mint(_secret(), subject=args.subject, scope=args.scope, ttl_s=args.ttl), flush=True)
    return 0
