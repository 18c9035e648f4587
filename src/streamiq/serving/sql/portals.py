"""Portals and cursors: a statement's answer held for a client to read in parts.

A portal is what Bind makes and Execute reads, ``max_rows`` at a time (PortalSuspended
until the last); a cursor is the same thing declared in SQL (``DECLARE c CURSOR FOR
...``, read by ``FETCH``/``MOVE``, dropped by ``CLOSE``), and is also a portal of that
name for the protocol (psycopg describes its named cursors as portals). As in
PostgreSQL, the unnamed portal ends at Sync, the others at the end of their transaction
(every Sync outside ``BEGIN``), and a cursor ``WITH HOLD`` when it is closed. Answers
are held whole (at most the row limit), so a cursor never reads a view twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from streamiq.errors import BadRequest, BadSql, NoCursor
from streamiq.serving.sql.duck import Answer

__all__ = ["CursorStatement", "Portal", "Portals", "cursor_statement"]

_NAME = r'("(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_DECLARE = re.compile(
    rf"^\s*DECLARE\s+{_NAME}\s+((?:(?:BINARY|ASENSITIVE|INSENSITIVE|NO\s+SCROLL|SCROLL)\s+)*)"
    r"CURSOR\s+(?:(WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(.*?)\s*;?\s*$", re.I | re.S)
_FETCH = re.compile(
    rf"^\s*(FETCH|MOVE)\s+(?:(NEXT|FORWARD\s+ALL|FORWARD\s+\d+|FORWARD|ALL|\d+|"
    rf"PRIOR|FIRST|LAST|ABSOLUTE\s+-?\d+|RELATIVE\s+-?\d+|BACKWARD(?:\s+ALL|\s+\d+)?)\s+)?"
    rf"(?:(?:FROM|IN)\s+)?{_NAME}\s*;?\s*$", re.I | re.S)
_CLOSE = re.compile(rf"^\s*CLOSE\s+(ALL|{_NAME})\s*;?\s*$", re.I | re.S)
CURSOR_COMMANDS = frozenset({"DECLARE", "FETCH", "MOVE", "CLOSE"})


def _name(raw: str) -> str:
    return raw[1:-1].replace('""', '"') if raw.startswith('"') else raw.lower()


@dataclass(frozen=True)
class CursorStatement:
    """``DECLARE`` (``query``, ``hold``), ``FETCH``/``MOVE`` (``count``: rows, None:
    all) or ``CLOSE`` (``name`` None: all)."""

    kind: str
    name: str | None
    query: str = ""
    hold: bool = False
    count: int | None = 1


def _count(direction: str | None) -> int | None:
    words = (direction or "NEXT").upper().split()
    if words[0] in ("PRIOR", "FIRST", "LAST", "ABSOLUTE", "RELATIVE", "BACKWARD"):
        raise BadRequest(f"cursor can only scan forward ({' '.join(words)}): declare it "
                         "again to read it from the start")
    if words[-1] == "ALL":
        return None
    return int(words[-1]) if words[-1].isdigit() else 1


def cursor_statement(sql: str) -> CursorStatement | None:
    """``sql`` parsed when it is a cursor command (BadSql if it is one we cannot read),
    else None."""
    head = sql.lstrip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
    if head not in CURSOR_COMMANDS:
        return None
    if head == "DECLARE":
        m = _DECLARE.match(sql)
        if m is None:
            raise BadSql("syntax error in DECLARE: DECLARE name [BINARY] [NO SCROLL] CURSOR "
                         "[WITH HOLD | WITHOUT HOLD] FOR query")
        return CursorStatement("DECLARE", _name(m.group(1)), m.group(4),
                               (m.group(3) or "").upper() == "WITH")
    if head == "CLOSE":
        c = _CLOSE.match(sql)
        if c is None:
            raise BadSql("syntax error in CLOSE: CLOSE name | CLOSE ALL")
        return CursorStatement("CLOSE", None if c.group(1).upper() == "ALL"
                               else _name(c.group(1)))
    f = _FETCH.match(sql)
    if f is None:
        raise BadSql(f"syntax error in {head}: {head} [NEXT | FORWARD n | n | ALL] "
                     "[FROM] name")
    return CursorStatement(f.group(1).upper(), _name(f.group(3)), count=_count(f.group(2)))


@dataclass
class Portal:
    """A statement bound to its values; its answer once run, and the rows sent."""

    run: Any  # what runs it: the prepared statement (protocol's), kept for Execute
    values: list[Any]
    formats: list[int]
    answer: Answer | None = None
    sent: int = 0
    hold: bool = False  # a cursor WITH HOLD: outlives its transaction
    cursor: bool = False

    def take(self, count: int | None) -> list[tuple[Any, ...]]:
        """The next ``count`` rows (None or 0: the rest)."""
        assert self.answer is not None and self.answer.rows is not None
        end = len(self.answer.rows) if not count else self.sent + count
        rows = self.answer.rows[self.sent:end]
        self.sent += len(rows)
        return rows

    @property
    def done(self) -> bool:
        return (self.answer is not None and (self.answer.rows is None
                                             or self.sent >= len(self.answer.rows)))


class Portals:
    """A session's portals and cursors by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, Portal] = {}

    def get(self, name: str) -> Portal:
        portal = self.by_name.get(name)
        if portal is None:
            what = "cursor" if name else "portal"
            raise NoCursor(f'{what} "{name}" does not exist')
        return portal

    def cursor(self, name: str) -> Portal:
        portal = self.by_name.get(name)
        if portal is None or not portal.cursor:
            raise NoCursor(f'cursor "{name}" does not exist')
        return portal

    def add(self, name: str, portal: Portal) -> None:
        if portal.cursor and name in self.by_name:
            raise NoCursor(f'cursor "{name}" already exists')
        self.by_name[name] = portal

    def close(self, name: str | None) -> None:
        if name is None:
            self.by_name = {k: p for k, p in self.by_name.items() if not p.cursor}
        elif self.by_name.pop(name, None) is None:
            raise NoCursor(f'cursor "{name}" does not exist')

    def end_of_transaction(self) -> None:
        """Drop every portal but the cursors declared WITH HOLD."""
        self.by_name = {k: p for k, p in self.by_name.items() if p.hold}
