"""Position tokens (serving/changelog/consistency.py): round trip, and ValueError for
anything else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamiq.serving.changelog.consistency import parse_tokens, reflects, token_for

# a topic as tokens carry it: no "," (the separator), no surrounding blanks, non-empty
topics = st.text(min_size=1, max_size=30).filter(lambda t: "," not in t and t == t.strip())
offsets = st.integers(min_value=0, max_value=2**63 - 1)
tokens = st.tuples(topics, st.integers(min_value=0, max_value=10_000), offsets)


@given(st.lists(tokens, min_size=1, max_size=5))
def test_tokens_round_trip(toks: list[tuple[str, int, int]]) -> None:
    raw = ",".join(token_for(*t) for t in toks)
    assert parse_tokens(raw) == toks


@given(st.text(max_size=100) | st.text(alphabet="0123456789:, ab\u00b2\u0663", max_size=30))
def test_garbage_is_tokens_or_value_error(raw: str) -> None:
    try:
        out = parse_tokens(raw)
    except ValueError:
        return
    assert out and all(t and p >= 0 and o >= 0 for t, p, o in out)


@given(st.lists(tokens, min_size=1, max_size=5), st.integers(min_value=0, max_value=3))
def test_reflects_exactly_past_the_offset(toks: list[tuple[str, int, int]], extra: int) -> None:
    past: dict[str, dict[int, int]] = {}
    for t, p, o in toks:
        past.setdefault(t, {})[p] = max(past.get(t, {}).get(p, 0), o + 1 + extra)
    assert reflects(past, toks)
    t, p, o = toks[0]
    assert not reflects({**past, t: {**past[t], p: o}}, toks)
