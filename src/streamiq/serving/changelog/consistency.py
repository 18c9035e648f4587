"""Position tokens: how an ingest write maps to "visible in the view".

The ingest service answers every write with a token ``topic:partition:offset``. The
pipeline's markers tell each changelog partition which input offsets it reflects;
a replica reflects a token once its position for that input partition is past the
offset. Several tokens join with ``,``; a query carrying them waits (bounded) until
the answering replica reflects them all, which also gives monotonic reads across
nodes: a client that passes the newest token it has seen never reads older state.

A row of a view whose aggregation the pipeline builds also names, per input
partition, the last offset it folded (header ``streamiq-pos``, the same
``topic:partition:offset`` form, offsets inclusive): a key's records of one input
partition are folded in order, so the stored row of key K reflects a token of that
partition for K once its offset there is at least the token's (:func:`row_reflects`),
before any marker says so for the whole partition.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["Token", "parse_tokens", "reflects", "row_claims", "row_covered", "row_reflects",
           "token_for"]

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


def row_claims(raw: bytes) -> dict[tuple[str, int], int] | None:
    """A row's ``streamiq-pos`` header as (topic, partition) -> offset; None if malformed."""
    try:
        return {(t, p): o for t, p, o in parse_tokens(raw.decode())}
    except (ValueError, UnicodeDecodeError):
        return None


def row_reflects(raw: bytes | None, position: Mapping[str, Mapping[int, int]],
                 tokens: list[Token]) -> bool:
    """True when every token is reflected by the partition's ``position`` (markers) or,
    for the key whose stored row made ``raw`` (its positions), by that row."""
    claims = row_claims(raw) if raw is not None else None
    return all(position.get(t, {}).get(p, 0) > o
               or (claims is not None and claims.get((t, p), -1) >= o)
               for t, p, o in tokens)


def row_covered(raw: bytes, position: Mapping[str, Mapping[int, int]]) -> bool:
    """The partition's ``position`` already says all a row's positions say (or they
    cannot be read): the row need not be remembered."""
    claims = row_claims(raw)
    return claims is None or all(position.get(t, {}).get(p, 0) > o
                                 for (t, p), o in claims.items())
