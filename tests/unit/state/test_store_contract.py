"""The ``Store`` contract, run over every kind ``open_store`` opens (RocksDB, memory):
what the serving tier relies on, so that a unit test on a ``MemoryStore`` says what a
node on RocksDB does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamiq.state import KINDS, Checkpoint, MemoryStore, Store, open_store
from streamiq.state.rocksdb import RocksDBStore


@pytest.fixture(params=KINDS)
def s(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store = open_store(request.param, tmp_path / "db")
    yield store
    store.close()


def test_the_factory_opens_each_kind(tmp_path: Path) -> None:
    assert isinstance(open_store("rocksdb", tmp_path / "r"), RocksDBStore)
    assert isinstance(open_store("memory", tmp_path / "m"), MemoryStore)
    assert not (tmp_path / "m").exists()  # memory writes nothing to disk
    with pytest.raises(ValueError, match="unknown store 'lmdb': expected one of rocksdb, "
                                         "memory"):
        open_store("lmdb", tmp_path / "x")  # type: ignore[arg-type]


def test_apply_get_scan_and_checkpoint_roundtrip(s: Store) -> None:
    s.apply(1, [(b"b", b"2"), (b"a", b"1"), (b"c", b"3")],
            Checkpoint(offset=3, position={"in": {0: 10}}))
    s.apply(2, [(b"a", b"other")], Checkpoint(offset=1))
    assert s.get(1, b"a") == b"1" and s.get(2, b"a") == b"other" and s.get(1, b"zz") is None
    assert s.multi_get(1, [b"c", b"x"]) == [b"3", None]
    assert list(s.scan(1)) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert list(s.scan(1, b"b", b"c")) == [(b"b", b"2")]
    assert s.checkpoint(1) == Checkpoint(offset=3, position={"in": {0: 10}})
    assert s.checkpoint(2) == Checkpoint(offset=1) and s.checkpoint(3) is None


def test_delete_and_drop(s: Store) -> None:
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=1))
    s.apply(0, [(b"k", None)], Checkpoint(offset=2))
    assert s.get(0, b"k") is None and s.checkpoint(0) == Checkpoint(offset=2)
    s.apply(0, [(b"k", b"v"), (b"j", b"w")], Checkpoint(offset=3))
    s.apply(1, [(b"k", b"one")], Checkpoint(offset=1))
    s.drop(0)
    assert s.get(0, b"k") is None and s.checkpoint(0) is None and list(s.scan(0)) == []
    assert s.get(1, b"k") == b"one" and s.checkpoint(1) == Checkpoint(offset=1)
    s.drop(7)  # never held: nothing to do
    s.apply(0, [(b"a", b"again")], Checkpoint(offset=9))  # a dropped partition comes back
    assert list(s.scan(0)) == [(b"a", b"again")]


def test_keys_sort_as_unsigned_bytes(s: Store) -> None:
    keys = [b"\xff", b"a\x00", b"", b"b", b"a", b"\x00", b"\x7f", b"\x80", b"ab", b"a\xff"]
    s.apply(0, [(k, b"v" + k) for k in keys], Checkpoint(offset=1))
    assert [k for k, _ in s.scan(0)] == sorted(keys)
    assert [k for k, _ in s.scan(0, b"a", b"b")] == [b"a", b"a\x00", b"ab", b"a\xff"]
    assert [k for k, _ in s.scan(0, b"\x80")] == [b"\x80", b"\xff"]
    assert [k for k, _ in s.scan(0, None, b"\x00")] == [b""]
    assert list(s.scan(0, b"b", b"a")) == [] and list(s.scan(0, b"c", b"c")) == []
    assert s.get(0, b"") == b"v" and s.multi_get(0, [b"\xff", b"", b"zz"]) == [
        b"v\xff", b"v", None]


def test_partitions_are_apart(s: Store) -> None:
    """Partitions 255 and 256 differ in one byte of RocksDB's prefix; nothing of one is
    seen in the other, at either end of a scan."""
    s.apply(255, [(b"\xff" * 3, b"x")], Checkpoint(offset=1))
    s.apply(256, [(b"", b"y"), (b"a", b"z")], Checkpoint(offset=1))
    assert list(s.scan(255)) == [(b"\xff" * 3, b"x")]
    assert list(s.scan(256)) == [(b"", b"y"), (b"a", b"z")]
    assert list(s.scan(254)) == [] and s.get(256, b"\xff" * 3) is None


def test_a_batch_sets_a_key_in_order(s: Store) -> None:
    """Within a batch the last write of a key wins; a key put and deleted is gone."""
    s.apply(0, [(b"k", b"1"), (b"k", b"2"), (b"gone", b"x"), (b"gone", None)],
            Checkpoint(offset=4))
    s.apply(0, [(b"back", None), (b"back", b"3")], Checkpoint(offset=6))
    assert list(s.scan(0)) == [(b"back", b"3"), (b"k", b"2")]
    assert s.get(0, b"gone") is None


def test_a_checkpoint_alone_is_stored(s: Store) -> None:
    s.apply(4, [], Checkpoint(offset=12, position={"in": {1: 5}, "other": {0: 0}}))
    assert s.checkpoint(4) == Checkpoint(offset=12, position={"in": {1: 5}, "other": {0: 0}})
    assert list(s.scan(4)) == []


def test_the_stored_checkpoint_is_not_the_callers(s: Store) -> None:
    cp = Checkpoint(offset=1, position={"in": {0: 10}})
    s.apply(0, [], cp)
    cp.position["in"][0] = 99  # the materializer's dicts live on
    got = s.checkpoint(0)
    assert got == Checkpoint(offset=1, position={"in": {0: 10}})
    assert got is not None
    got.position["in"][0] = 42
    assert s.checkpoint(0) == Checkpoint(offset=1, position={"in": {0: 10}})


def test_a_scan_sees_the_rows_as_they_were_when_it_began(s: Store) -> None:
    s.apply(0, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], Checkpoint(offset=3))
    it = s.scan(0)
    assert next(it) == (b"a", b"1")
    s.apply(0, [(b"b", None), (b"bb", b"new"), (b"c", b"changed")], Checkpoint(offset=6))
    assert list(it) == [(b"b", b"2"), (b"c", b"3")]
    assert list(s.scan(0)) == [(b"a", b"1"), (b"bb", b"new"), (b"c", b"changed")]


def test_many_keys_in_many_batches_stay_in_order(s: Store) -> None:
    """Small batches (kept sorted one key at a time) and large ones (sorted again) alike,
    each adding keys, changing some and deleting some it holds (and some it does not)."""
    held: dict[bytes, bytes] = {}
    for i, size in enumerate([1, 5, 300, 2, 1000, 3, 40]):
        batch: list[tuple[bytes, bytes | None]] = [
            (((i * 7919 + j * 104_729) % 2003).to_bytes(2, "big"), f"{i}.{j}".encode())
            for j in range(size)]
        batch += [(k, None) for k in sorted(held)[i % 3::3]] + [(b"never", None)]
        for key, value in batch:
            if value is None:
                held.pop(key, None)
            else:
                held[key] = value
        s.apply(0, batch, Checkpoint(offset=i))
        assert list(s.scan(0)) == sorted(held.items())
        assert s.multi_get(0, sorted(held)) == [held[k] for k in sorted(held)]
    assert list(s.scan(0, b"\x01", b"\x03")) == sorted(
        (k, v) for k, v in held.items() if b"\x01" <= k < b"\x03")


def test_readers_see_whole_batches_while_a_thread_writes(s: Store) -> None:
    """The materializer writes from its thread while queries read: each batch sets every
    key to its number, so a scan or a multi-get that saw half a batch would mix two."""
    keys = [f"k{i:03d}".encode() for i in range(200)]
    s.apply(0, [(k, b"0") for k in keys], Checkpoint(offset=0))
    reading, done = threading.Event(), threading.Event()

    def write() -> None:
        reading.wait(30)  # the reader is under way: its reads overlap the writes
        for n in range(1, 300):
            s.apply(0, [(k, str(n).encode()) for k in keys], Checkpoint(offset=n))
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while not done.is_set():
            scanned = {v for _, v in s.scan(0)}
            got = set(s.multi_get(0, keys[::-7]))
            assert len(scanned) == 1 and len(got) == 1, (scanned, got)
            reading.set()
    finally:
        reading.set()
        writer.join()
    assert {v for _, v in s.scan(0)} == {b"299"}


def test_stats_count_the_rows(s: Store) -> None:
    assert s.stats()["rows"] == 0
    s.apply(0, [(b"a", b"1"), (b"b", b"22")], Checkpoint(offset=2))
    stats = s.stats()
    assert stats["rows"] >= 2 and stats["bytes"] > 0  # RocksDB's are estimates
    assert stats["memory"] > 0  # the memtable holding them, at least


def test_memory_stats_are_exact() -> None:
    s = MemoryStore()
    s.apply(0, [(b"a", b"1"), (b"b", b"22")], Checkpoint(offset=2))
    s.apply(1, [(b"c", b"333")], Checkpoint(offset=1))
    s.apply(0, [(b"a", None), (b"b", b"2")], Checkpoint(offset=4))
    assert s.stats() == {"rows": 2, "bytes": 2 + 4, "memory": 2 + 4}
    s.drop(1)
    assert s.stats() == {"rows": 1, "bytes": 2, "memory": 2}
    s.close()
    assert s.stats() == {"rows": 0, "bytes": 0, "memory": 0} and s.get(0, b"b") is None


def test_memory_writes_in_place_once_no_scan_reads() -> None:
    """A write copies a partition's rows only while a scan reads them (copy on write):
    a scan that finished, or was dropped half-way, costs later writes nothing."""
    s = MemoryStore()
    s.apply(0, [(b"a", b"1"), (b"b", b"2")], Checkpoint(offset=2))
    version = s._parts[0].data
    assert list(s.scan(0)) == [(b"a", b"1"), (b"b", b"2")]
    half = s.scan(0)
    next(half)
    del half  # dropped before its end
    s.apply(0, [(b"c", b"3")], Checkpoint(offset=3))
    assert s._parts[0].data is version  # written in place
    reading = s.scan(0)
    next(reading)
    s.apply(0, [(b"d", b"4")], Checkpoint(offset=4))
    assert s._parts[0].data is not version and list(reading) == [(b"b", b"2"), (b"c", b"3")]
