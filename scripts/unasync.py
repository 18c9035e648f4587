"""Generate the synchronous client (client/sync.py) from the asyncio one (client/aio.py).

httpcore's ``unasync`` approach: the async client is the one written by hand; the sync
client is a rewrite of it, token by token (``async def`` -> ``def``, ``await x`` -> ``x``,
``AsyncClient`` -> ``Client``, ...), plus a few whole-line rewrites where the sync
spelling differs (``yield from``, import order). tests/unit/client/test_unasync.py fails
when sync.py is not what this script writes.

    python scripts/unasync.py          # rewrite client/sync.py
    python scripts/unasync.py --check  # exit 1 if client/sync.py is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parent.parent / "src" / "streamiq" / "client"
SOURCE, TARGET = CLIENT / "aio.py", CLIENT / "sync.py"

HEADER = ("# Generated from aio.py by scripts/unasync.py: edit aio.py, then run\n"
          "# `python scripts/unasync.py` (tests/unit/client/test_unasync.py checks it).\n")

# whole words, in this order
TOKENS = [
    ("AsyncIterator", "Iterator"),
    ("AsyncBaseTransport", "BaseTransport"),
    ("AsyncClient", "Client"),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    ("aclose", "close"),
]
# exact text, after the tokens
TEXT = [
    ("The asyncio client", "The synchronous client"),
    ("Query a streamiq cluster from asyncio;", "Query a streamiq cluster;"),
    ("from collections.abc import Iterator, Iterable, Sequence",
     "from collections.abc import Iterable, Iterator, Sequence"),
    ("            for row in doc[\"rows\"]:\n                yield row\n",
     "            yield from doc[\"rows\"]\n"),
]


def unasync(source: str) -> str:
    """sync.py's text for aio.py's ``source``."""
    out = rewrite(source)
    for old, new in TEXT:
        if old not in out:
            raise SystemExit(f"unasync: expected text not found in {SOURCE.name}: {old!r}")
        out = out.replace(old, new)
    return HEADER + out


def rewrite(source: str) -> str:
    """The token rewrite, line by line, re-aligning continuation lines."""
    lines, shift, align, depth = [], 0, 0, 0
    for line in source.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))
        if depth > 0 and shift and indent >= align:
            line = line[shift:]  # a continuation aligned with a bracket that moved left
        new = _line(line)
        if depth == 0:
            shift, align = len(line) - len(new), _aligned_at(line)
        depth = max(0, depth + sum(new.count(c) for c in "([{") - sum(new.count(c) for c in ")]}"))
        lines.append(new)
    return "".join(lines)


def _aligned_at(line: str) -> int:
    """The column continuation lines align with: just after the line's first bracket
    left open, unless nothing follows it (a hanging indent, which does not move)."""
    opened: list[int] = []
    for i, c in enumerate(line):
        if c in "([{":
            opened.append(i)
        elif c in ")]}" and opened:
            opened.pop()
    if not opened or not line[opened[0] + 1:].strip():
        return 1 << 30
    return opened[0] + 1


def _line(line: str) -> str:
    out = re.sub(r"\basync (def|with|for)\b", r"\1", line)
    # (await f(...)).x -> f(...).x: the parentheses only bound the await
    out = re.sub(r"\(await ([\w.]+\((?:[^()]|\([^()]*\))*\))\)", r"\1", out)
    out = re.sub(r"\bawait ", "", out)
    for old, new in TOKENS:
        out = re.sub(rf"\b{old}\b", new, out)
    return out


def main(argv: list[str]) -> int:
    generated = unasync(SOURCE.read_text())
    if "--check" in argv:
        if TARGET.read_text() != generated:
            print(f"{TARGET} is out of date: run python scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
