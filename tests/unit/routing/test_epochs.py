"""Membership topics per epoch: who publishes where, who listens where, what expires."""

from __future__ import annotations

import pytest

from streamiq.routing.epochs import EpochTopics

T = EpochTopics("_streamiq-c-members", 60)


def test_a_heartbeat_goes_to_its_epochs_topic() -> None:
    assert T.publish(0) == "_streamiq-c-members-0"
    assert T.publish(59.9) == "_streamiq-c-members-0"
    assert T.publish(60) == "_streamiq-c-members-1"


@pytest.mark.parametrize("skew", [-59.0, -30.0, 0.0, 0.5, 30.0, 59.0])
def test_nodes_whose_clocks_differ_by_less_than_a_period_hear_each_other(skew: float) -> None:
    for now in (1000.0, 1019.9, 1020.0, 1079.5):  # across an epoch boundary
        assert T.publish(now + skew) in T.listen(now)
        assert T.publish(now) in T.listen(now + skew)


def test_topics_are_created_ahead_and_expire_two_epochs_back() -> None:
    now = 600.0  # epoch 10
    assert T.ahead(now) == ["_streamiq-c-members-10", "_streamiq-c-members-11"]
    existing = [T.name(e) for e in range(5, 12)] + ["_streamiq-c-members", "other-3",
                                                     "_streamiq-c-members-x",
                                                     "_streamiq-cc-members-1"]
    assert T.expired(now, existing) == [T.name(e) for e in range(5, 8)]
    # nothing a node within a period's skew reads is expired
    for skew in (-59.0, 59.0):
        assert not set(T.listen(now + skew)) & set(T.expired(now, existing))


def test_retention_and_bad_periods() -> None:
    assert T.retention_ms() == 180_000
    with pytest.raises(ValueError, match="positive"):
        EpochTopics("x", 0)
