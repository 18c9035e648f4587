"""Spark SQL's ``hash()`` of string columns, in Python: the expression of the
``HashPartitioning`` an aggregation's shuffle uses (``pmod(hash(keys), tasks)``).

Spark hashes a UTF-8 string with ``Murmur3_x86_32.hashUnsafeBytes`` (seed 42, each
column's hash the next one's seed; a null column leaves it as it is). It is *not* the
standard Murmur3 tail: the bytes after the last whole 4-byte word are each mixed in as
a whole block (a signed byte), as Spark has done since 2.x for compatibility. Crafting
tick keys (``ticks.py``) needs thousands of these; computing them here spares the
pipeline a Spark job per view at every start. ``tests/integration/pipeline/
test_tick_keys.py`` checks the result against Spark's own shuffle.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["SEED", "spark_hash", "task_of"]

SEED = 42
_M = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _M, 15) * _C2) & _M


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M
    return h1 ^ (h1 >> 16)


def _bytes_hash(data: bytes, seed: int) -> int:
    """``Murmur3_x86_32.hashUnsafeBytes`` (unsigned 32 bits in, unsigned out)."""
    aligned = len(data) - len(data) % 4
    h1 = seed
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for b in data[aligned:]:  # each trailing byte as a block, sign-extended
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & _M))
    return _fmix(h1, len(data))


def spark_hash(values: Sequence[str | None]) -> int:
    """``hash(col1, col2, ...)`` of string values, as Spark gives it (a signed int)."""
    h = SEED
    for v in values:
        if v is not None:
            h = _bytes_hash(v.encode(), h)
    return h - (1 << 32) if h & 0x80000000 else h


def task_of(values: Sequence[str | None], tasks: int) -> int:
    """The shuffle task a key's row goes to: ``pmod(hash(keys), tasks)``."""
    return spark_hash(values) % tasks  # Python's % of a positive modulus is pmod
