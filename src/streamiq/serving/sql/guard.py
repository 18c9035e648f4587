"""What a statement's text must pass before it is parsed: its IN lists are bounded.

sqlglot builds a tree node per value, so a long IN list is parsing's largest cost (an
80,000-value list: about a second and 150 MB); the statement size bound
(``--sql-max-statement-bytes``, checked as the message arrives) and this count keep
every parse small. The count reads the text once with one regular expression: quoted
strings, quoted names and comments are skipped, and the values of each ``IN (`` are
counted at their own depth (a subquery's commas are not the list's).
"""

from __future__ import annotations

import re

from streamiq.errors import TooManyRows

__all__ = ["check_in_lists", "longest_in_list"]

_TOKENS = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|--[^\n]*|/\*.*?(?:\*/|$)|"""
                     r"""\$(\w*)\$.*?(?:\$\1\$|$)|\bIN\s*\(|[(),]""",
                     re.IGNORECASE | re.DOTALL)


def longest_in_list(sql: str) -> int:
    """The most values any ``IN (...)`` of ``sql`` lists (0: none)."""
    stack: list[int | None] = []  # per open parenthesis: its IN list's count so far, or None
    longest = 0
    for m in _TOKENS.finditer(sql):
        tok = m.group(0)
        if tok[0] in "'\"-/$":
            continue
        if tok == "(":
            stack.append(None)
        elif tok == ",":
            if stack and stack[-1] is not None:
                stack[-1] += 1
        elif tok == ")":
            if stack:
                n = stack.pop()
                longest = max(longest, n or 0)
        else:  # IN (
            stack.append(1)
    return max([longest, *(n for n in stack if n is not None)])


def check_in_lists(sql: str, limit: int) -> None:
    """``TooManyRows`` (54000) when an IN list holds more than ``limit`` values."""
    n = longest_in_list(sql)
    if n > limit:
        raise TooManyRows(f"an IN list of {n} values, more than {limit} (--sql-max-in-list): "
                          "narrow it, or read a range of keys", limit=limit)
