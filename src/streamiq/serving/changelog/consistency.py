"""Position tokens: how an ingest write maps to "visible in the view".

The ingest service answers every write with a token ``topic:partition:offset``. The
pipeline's markers tell each changelog partition which input offsets it reflects;
a replica reflects a token once its position for that input partition is past the
offset. Several tokens join with ``,``; a query carrying them waits (bounded) until
the answering replica reflects them all, which also gives monotonic reads across
nodes: a client that passes the newest token it has seen never reads older state.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["Token", "parse_tokens", "reflects", "token_for"]

Token = tuple[str, int, int]


def token_for(topic: str, partition: int, offset: int) -> str:
    return f"{topic}:{partition}:{offset}"


def parse_tokens(raw: str) -> list[Token]:
    """Parse ``topic:partition:offset[,...]``; ValueError names the malformed part."""
    out: list[Token] = []
    for part in raw.split(","):
        topic, _, rest = part.strip().rpartition(":")
        topic, _, p = topic.rpartition(":")
        if not topic or not p.isdigit() or not rest.isdigit():
            raise ValueError(f"position token {part!r} is not topic:partition:offset")
        out.append((topic, int(p), int(rest)))
    return out


def reflects(position: Mapping[str, Mapping[int, int]], tokens: list[Token]) -> bool:
    """True when every token's record is included in ``position`` (next offsets)."""
    return all(position.get(t, {}).get(p, 0) > o for t, p, o in tokens)
