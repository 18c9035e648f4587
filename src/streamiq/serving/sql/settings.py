"""A session's settings: ``SET``/``RESET``/``SHOW``, and the consistency ones in SQL terms.

``streamiq.position`` (topic:partition:offset[,...]), ``streamiq.max_lag`` (records),
``streamiq.wait_ms``, ``streamiq.max_staleness_ms``, ``streamiq.consistent`` (on/off: every
statement at one cut of the input) and ``streamiq.partial`` (on/off) are the HTTP API's
``position``, ``max_lag``, ``wait_ms``, ``max_staleness_ms`` and ``consistent``
parameters and its PARTIAL answers; any other name is kept
and shown back (clients set ``client_encoding``, ``DateStyle``, ``extra_float_digits``).
A session keeps at most ``MAX_SETTINGS`` of them, each name at most ``MAX_NAME`` and
each value at most ``MAX_VALUE`` characters (54000 past either: clients set a few short
ones, and every session's settings are held in the node's memory).
"""

from __future__ import annotations

import re

from streamiq.errors import BadRequest, NotFound, TooManyRows
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.sql.engine import Freshness
from streamiq.serving.sql.pgshims import SERVER_VERSION

__all__ = ["MAX_NAME", "MAX_SETTINGS", "MAX_VALUE", "SERVER_PARAMETERS", "Settings",
           "command_of"]

MAX_SETTINGS = 64  # names a session sets
MAX_NAME = 63  # PostgreSQL's own bound on a name (NAMEDATALEN - 1)
MAX_VALUE = 8192  # characters of a value (a position of 256 partitions fits)

#: what the server reports at startup (ParameterStatus) and SHOW answers by default
SERVER_PARAMETERS = {
    "server_version": SERVER_VERSION, "server_encoding": "UTF8", "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY", "integer_datetimes": "on", "standard_conforming_strings": "on",
    "TimeZone": "UTC", "IntervalStyle": "postgres", "is_superuser": "off",
}
_DEFAULTS = {k.lower(): v for k, v in SERVER_PARAMETERS.items()} | {
    "transaction_isolation": "read committed", "transaction isolation level": "read committed",
    "search_path": "public", "default_transaction_read_only": "on",
    "streamiq.position": "", "streamiq.max_lag": "", "streamiq.wait_ms": "",
    "streamiq.max_staleness_ms": "", "streamiq.partial": "off", "streamiq.consistent": "off",
    "statement_timeout": "0"}
_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([\w.\"]+)\s*(?:=|\s+TO\s+)\s*(.*?)\s*;?\s*$",
                  re.IGNORECASE | re.DOTALL)
#: read-only: the cut the last consistent statement read
CUT = "streamiq.cut"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|min|h)?$")
_UNITS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000}
_STREAMIQ = ("streamiq.position", "streamiq.max_lag", "streamiq.wait_ms",
             "streamiq.max_staleness_ms", "streamiq.partial", "streamiq.consistent")
_COMMANDS = {"BEGIN": "BEGIN", "START": "BEGIN", "COMMIT": "COMMIT", "END": "COMMIT",
             "ROLLBACK": "ROLLBACK", "ABORT": "ROLLBACK", "SET": "SET", "RESET": "RESET",
             "SHOW": "SHOW", "DISCARD": "DISCARD ALL", "DEALLOCATE": "DEALLOCATE",
             "SAVEPOINT": "SAVEPOINT", "RELEASE": "RELEASE"}


def command_of(sql: str) -> str | None:
    """The session command ``sql`` is (``SET``, ``SHOW``, ``BEGIN``...), or None: a query."""
    head = sql.lstrip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
    return head if head in _COMMANDS else None


def _int(name: str, value: str, top: int) -> str:
    if not value.isdigit() or int(value) > top:
        raise BadRequest(f'invalid value for parameter "{name}": "{value}" (a whole number '
                         f"from 0 to {top})")
    return value


def _duration_ms(name: str, value: str) -> str:
    """PostgreSQL's ``statement_timeout`` forms: ``5000`` (ms), ``'5s'``, ``'2min'``."""
    m = _DURATION.match(value.strip().lower())
    if m is None:
        raise BadRequest(f'invalid value for parameter "{name}": "{value}" (e.g. 5000, '
                         "'5s', '2min')")
    return str(int(float(m.group(1)) * _UNITS[m.group(2) or "ms"]))


def _check(name: str, value: str) -> str:
    if name == "statement_timeout":
        return _duration_ms(name, value)
    if name == "streamiq.position":
        try:
            parse_tokens(value)
        except ValueError as exc:
            raise BadRequest(f'invalid value for parameter "{name}": {exc}') from None
        return value
    if name in ("streamiq.partial", "streamiq.consistent"):
        flag = value.lower()
        if flag not in ("on", "off", "true", "false", "1", "0"):
            raise BadRequest(f'parameter "{name}" requires a Boolean value (on or off)')
        return "on" if flag in ("on", "true", "1") else "off"
    if name == "streamiq.wait_ms":
        return _int(name, value, 120_000)
    if name == "streamiq.max_staleness_ms":
        return _int(name, value, 3_600_000)
    if name == "streamiq.max_lag":
        return _int(name, value, 2**62)
    if name == CUT:
        raise BadRequest(f'parameter "{CUT}" cannot be changed: it shows the cut the last '
                         "consistent statement read")
    if name.startswith("streamiq."):
        raise NotFound(f'unrecognized configuration parameter "{name}"; streamiq\'s are '
                       + ", ".join(_STREAMIQ))
    return value


def _bounded(name: str, value: str, count: int) -> None:
    if len(name) > MAX_NAME:
        raise TooManyRows(f"a setting's name of {len(name)} characters (at most {MAX_NAME})",
                          limit=MAX_NAME)
    if len(value) > MAX_VALUE:
        raise TooManyRows(f'a value of {len(value)} characters for "{name}" (at most '
                          f"{MAX_VALUE})", limit=MAX_VALUE)
    if count > MAX_SETTINGS:
        raise TooManyRows(f"more than {MAX_SETTINGS} settings in one session: RESET some",
                          limit=MAX_SETTINGS)


class Settings:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.in_transaction = False
        #: the cut the last consistent statement read (``SHOW streamiq.cut``), and the
        #: one every consistent statement of the open transaction reads (its first's)
        self.cut: str | None = None
        self.transaction_cut: str | None = None

    def command(self, head: str, sql: str) -> str:
        """Run a session command; its CommandComplete tag (SHOW is ``show``'s)."""
        if head in ("BEGIN", "START"):
            self.in_transaction = True
            self.transaction_cut = None
        elif head in ("COMMIT", "END", "ROLLBACK", "ABORT") and not re.search(
                r"\bTO\b", sql, re.IGNORECASE):  # ROLLBACK TO SAVEPOINT: still in it
            self.in_transaction = False
            self.transaction_cut = None
        elif head == "SET":
            self._set(sql)
        elif head == "RESET":
            name = sql.split(None, 1)[1].strip().rstrip(";").strip().lower()
            self.values = {} if name == "all" else {
                k: v for k, v in self.values.items() if k != name}
        elif head == "DISCARD":
            self.values.clear()
        return _COMMANDS[head]

    def _set(self, sql: str) -> None:
        m = _SET.match(sql)
        if m is None:  # SET TRANSACTION ..., SET SESSION CHARACTERISTICS ...: nothing to do
            if re.match(r"^\s*SET\s+(SESSION\s+CHARACTERISTICS|TRANSACTION)", sql, re.I):
                return
            raise BadRequest(f"cannot read this SET: {sql.strip()[:80]!r} (SET name = value)")
        name = m.group(1).strip('"').lower()
        raw = m.group(2).strip()
        value = raw[1:-1].replace("''", "'") if raw[:1] == raw[-1:] == "'" and len(raw) > 1 \
            else raw
        if value.upper() == "DEFAULT":
            self.values.pop(name, None)
            return
        _bounded(name, value, len(self.values) + (name not in self.values))
        self.values[name] = _check(name, value)

    def show(self, sql: str) -> tuple[str, str]:
        """``SHOW name``: (the column's name, the value)."""
        name = " ".join(sql.split()[1:]).rstrip(";").strip().strip('"').lower()
        if name == CUT:
            return name, self.cut or ""
        if name in self.values:
            return name, self.values[name]
        if name in _DEFAULTS:
            return name.replace(" ", "_"), _DEFAULTS[name]
        raise NotFound(f'unrecognized configuration parameter "{name}"')

    def _get(self, name: str) -> str:
        return self.values.get(name, "")

    def read_at(self, cut: str) -> None:
        """A consistent statement read ``cut``: shown, and kept for the transaction."""
        self.cut = cut
        if self.in_transaction and self.transaction_cut is None:
            self.transaction_cut = cut

    @property
    def fresh(self) -> Freshness:
        lag, wait = self._get("streamiq.max_lag"), self._get("streamiq.wait_ms")
        stale = self._get("streamiq.max_staleness_ms")
        return Freshness(position=self._get("streamiq.position") or None,
                         max_lag=int(lag) if lag else None, wait_ms=int(wait) if wait else None,
                         max_staleness_ms=int(stale) if stale else None,
                         consistent=self._get("streamiq.consistent") == "on",
                         cut=self.transaction_cut if self.in_transaction else None)

    def timeout_s(self, ceiling_s: float) -> float:
        """The session's ``statement_timeout``, at most the server's (0: the server's)."""
        ms = int(self._get("statement_timeout") or 0)
        return min(ms / 1000, ceiling_s) if ms else ceiling_s

    @property
    def partial(self) -> bool:
        return self._get("streamiq.partial") == "on"
