from __future__ import annotations

import pytest

from streamiq.serving.changelog.consistency import parse_tokens, reflects, token_for


def test_token_roundtrip_with_topic_containing_colons_and_dashes() -> None:
    assert parse_tokens(token_for("bank-transactions", 2, 41)) == [("bank-transactions", 2, 41)]
    assert parse_tokens("a:b:1:2,c:0:5") == [("a:b", 1, 2), ("c", 0, 5)]


@pytest.mark.parametrize("bad", ["", "topic", "t:x:1", "t:1:-1", ":1:2"])
def test_malformed_tokens_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="topic:partition:offset"):
        parse_tokens(bad)


def test_reflects_means_next_offset_is_past_the_record() -> None:
    pos = {"t": {0: 5}}
    assert reflects(pos, [("t", 0, 4)])
    assert not reflects(pos, [("t", 0, 5)])
    assert not reflects(pos, [("t", 1, 0)])
    assert reflects(pos, [])
