from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamiq.kafka import partitioner
from streamiq.kafka.partitioner import murmur2, murmur2_py, partition_for

# Vectors from Apache Kafka's UtilsTest.testMurmur2 (clients module).
KAFKA_VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected
    assert murmur2_py(key.encode()) == expected


def test_the_compiled_hash_is_the_one_used() -> None:
    # murmurhash2 is a dependency: a node hashes every key it is asked for and every
    # changelog row it applies, and the Python one costs three times as much
    assert partitioner.unsigned is not partitioner.unsigned_py


@given(st.binary(max_size=80))
def test_compiled_and_python_agree(data: bytes) -> None:
    assert murmur2(data) == murmur2_py(data)
    assert partitioner.unsigned(data) == partitioner.unsigned_py(data)


def test_partition_is_positive_modulo() -> None:
    # Java: Utils.toPositive(murmur2(key)) % n, where toPositive masks the sign bit.
    for key, h in KAFKA_VECTORS.items():
        assert partition_for(key, 7) == (h & 0x7FFFFFFF) % 7
    assert partition_for(b"100001", 3) == partition_for("100001", 3)


def test_partition_rejects_zero_partitions() -> None:
    with pytest.raises(ValueError, match="partitions"):
        partition_for("k", 0)
