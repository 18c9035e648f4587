"""Spark's ``hash()`` in Python against the values Spark 4.3 gave for the same strings
(every tail length, multi-byte UTF-8, null columns). The crafted tick keys are also
checked against Spark's own shuffle: tests/integration/pipeline/test_tick_keys.py."""

from __future__ import annotations

import pytest

from streamiq.pipeline.sparkhash import spark_hash, task_of

SPARK = [
    (("", None), 142593372),
    (("a", None), 1485273170),
    (("ab", None), -97053317),
    (("abc", None), 1322437556),
    (("abcd", None), -396302900),
    (("abcde", None), 814637928),
    (("~tick~0.1.5", "~tick~"), -541923500),
    (("store-7", "GENERAL"), -1052453091),
    (("héllo", "wörld"), -272230481),
    (("日本語", "✓"), -107101184),
    (("100001", None), -1397851601),
    ((None, "x"), -80340190),
]


@pytest.mark.parametrize(("values", "expected"), SPARK)
def test_spark_hash_is_sparks(values: tuple[str | None, ...], expected: int) -> None:
    assert spark_hash(values) == expected


def test_task_is_a_non_negative_modulus() -> None:
    assert task_of(("ab", None), 7) == -97053317 % 7 >= 0
    assert {task_of((str(i),), 5) for i in range(100)} == set(range(5))
