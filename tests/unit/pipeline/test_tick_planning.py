"""The pipeline's tick planning without Spark: the aggregation's task count comes from
the checkpoint a stateful query keeps for life (a fresh checkpoint takes the default),
and only views the pipeline aggregates by string keys without a window fold ticks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from streamiq.pipeline.deadletter import checks
from streamiq.pipeline.ticks import shuffle_tasks, tick_key_text
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M


def _offsets(ck: Path, n: int, body: str) -> None:
    (ck / "offsets").mkdir(parents=True, exist_ok=True)
    (ck / "offsets" / str(n)).write_text(body)


def test_the_task_count_is_the_checkpoints(tmp_path: Path) -> None:
    ck = tmp_path / "balances"
    assert shuffle_tasks(ck, 3) == 3  # no checkpoint yet
    conf = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "5"}}
    _offsets(ck, 0, "v1\n" + json.dumps(conf) + "\n{}\n")
    _offsets(ck, 1, "v1\n{not json")  # torn: the one before is read
    (ck / "offsets" / ".1.crc").write_text("x")
    assert shuffle_tasks(ck, 3) == 5


def test_which_views_fold_ticks() -> None:
    assert BALANCES.ticks_ok and ORDER_COUNTS.ticks_ok
    assert not ORDER_COUNTS_1M.ticks_ok  # a window: a tick has no event time
    assert not dataclasses.replace(BALANCES, types={}).ticks_ok  # key type unknown
    assert not dataclasses.replace(BALANCES, transform=lambda df: df).ticks_ok


def test_keys_with_the_reserved_prefix_are_dead_lettered() -> None:
    assert tick_key_text(2, 1, 7) == "~tick~2.1.7"
    assert checks(BALANCES)[-1] == ("NOT startswith(`account`, '~tick~')",
                                    "account starts with the reserved '~tick~'")
    assert [c for _, c in checks(ORDER_COUNTS)][-2:] == [
        "store starts with the reserved '~tick~'", "type starts with the reserved '~tick~'"]
