"""A simple query's statements, split at ``;`` as PostgreSQL's lexer does: not inside
'quotes' (``E'...'`` with backslash escapes), "identifiers", ``$tag$...$tag$`` dollar
quotes, ``--`` comments or ``/* */`` comments (which nest)."""

from __future__ import annotations

import re

__all__ = ["split_statements"]

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$]")


def _quoted_end(text: str, i: int, quote: str, backslash: bool) -> int:
    """The index just past the quote closing the one at ``i``."""
    j = i + 1
    while j < len(text):
        ch = text[j]
        if backslash and ch == "\\":
            j += 2
            continue
        if ch == quote:
            if text.startswith(quote * 2, j):  # '' or "": the quote itself
                j += 2
                continue
            return j + 1
        j += 1
    return len(text)


def _comment_end(text: str, i: int) -> int:
    """Just past the ``*/`` closing the ``/*`` at ``i`` (nested ones included)."""
    depth, j = 0, i
    while j < len(text):
        if text.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif text.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return len(text)


def _skip(text: str, i: int) -> int:
    """Just past the quoted string, dollar quote or comment starting at ``i``, or
    ``i`` when none starts there."""
    ch = text[i]
    if ch in "'\"":
        escapes = ch == "'" and i > 0 and text[i - 1] in "eE" and (
            i < 2 or not _IDENT_CHAR.match(text[i - 2]))
        return _quoted_end(text, i, ch, escapes)
    if text.startswith("--", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):
        return _comment_end(text, i)
    if ch == "$" and (i == 0 or not _IDENT_CHAR.match(text[i - 1])):
        m = _DOLLAR.match(text, i)
        if m is not None:
            end = text.find(m.group(0), m.end())
            return len(text) if end < 0 else end + len(m.group(0))
    return i


def split_statements(text: str) -> list[str]:
    """A simple query's statements (empty ones dropped)."""
    out: list[str] = []
    start = i = 0
    while i < len(text):
        past = _skip(text, i)
        if past != i:
            i = past
            continue
        if text[i] == ";":
            out.append(text[start:i])
            start = i + 1
        i += 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]
