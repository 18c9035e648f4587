"""The bank workload's checks of a read at one cut: the input folded up to a cut (the
test's own fold of the topic, not the product's), and whether one cut is at or past
another (a reader sending its newest token never reads an older one)."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from confluent_kafka import Consumer, TopicPartition

from streamiq.serving.changelog.consistency import parse_tokens

__all__ = ["at_or_past", "fold"]


def fold(bootstrap: str, topic: str, cut: str, prefix: str,
         accounts: list[str]) -> dict[str, int]:
    """Each ``prefix`` account's balance from the input records up to ``cut`` (inclusive):
    deposits ``{account, amount}`` and transfers ``{account, to, amount}``."""
    ends = {p: o for t, p, o in parse_tokens(cut) if t == topic}
    assert ends, f"the cut {cut} names no partition of {topic}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fold-{time.time()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    balances: dict[str, int] = defaultdict(int)
    left = dict(ends)
    try:
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            p, o, value = m.partition(), m.offset(), m.value()
            if p is None or o is None or p not in left:
                continue
            if o <= ends[p] and value is not None:
                try:
                    rec = json.loads(value)
                except ValueError:
                    rec = None
                if isinstance(rec, dict) and str(rec.get("account", "")).startswith(prefix):
                    balances[rec["account"]] -= rec["amount"] if rec.get("to") else 0
                    balances[rec["to"] if rec.get("to") else rec["account"]] += rec["amount"]
            if o >= ends[p]:
                left.pop(p, None)
        assert not left, f"the input did not reach the cut {cut}: {left}"
    finally:
        c.close()
    return {k: v for k, v in balances.items() if v or k in accounts}


def at_or_past(cut: str, earlier: str) -> bool:
    """Every input partition of ``cut`` at or past ``earlier``'s offset for it."""
    now = {(t, p): o for t, p, o in parse_tokens(cut)}
    return all(now.get((t, p), -1) >= o for t, p, o in parse_tokens(earlier))
