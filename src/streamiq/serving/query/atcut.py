"""A view's store as of one cut of the input, for the partitions one node answers.

``AtCut`` has the reads a query makes of a store (``get``, ``multi_get``, ``scan``) and
answers them from the store and each partition's ``History``
(``serving/changelog/cuts.py``): a key changed lately has its value at the cut, any other
its stored value. A scan merges the keys that had a value at the cut but have none stored
now. ``finish`` checks that nothing the reads relied on was dropped meanwhile.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence

from streamiq.errors import CutMoved
from streamiq.serving.changelog.cuts import Cut, History, cut_token
from streamiq.state.base import Store

__all__ = ["AtCut"]

_GONE = object()  # a stored row the cut does not have


class AtCut:
    """``store`` read at ``cut`` for the partitions in ``histories``."""

    def __init__(self, store: Store, histories: Mapping[int, History], cut: Cut) -> None:
        self.store = store
        self.histories = histories
        self.cut = cut
        for history in histories.values():
            history.check(cut)
        settled = cut
        for history in histories.values():
            settled = history.settle(settled)
        if settled != cut:
            raise CutMoved("records within the cut were folded after records past it: "
                           "a lower cut", lower=cut_token(settled))

    def _fix(self, p: int, key: bytes, stored: bytes | None) -> bytes | None:
        changed, value = self.histories[p].at(key, self.cut)
        return value if changed else stored

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self._fix(partition, key, self.store.get(partition, key))

    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]:
        stored = self.store.multi_get(partition, keys)
        return [self._fix(partition, k, v) for k, v in zip(keys, stored, strict=True)]

    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        """Rows in key order as of the cut: the stored ones (each changed key's value at
        the cut instead), and changed keys no longer stored."""
        history = self.histories[partition]
        changed = ((k, _GONE) for k in history.changed(start, end))
        stored = self.store.scan(partition, start, end)
        last = None
        for key, value in heapq.merge(stored, changed, key=lambda kv: kv[0]):
            if key == last:
                continue
            last = key
            got = self._fix(partition, key, None if value is _GONE else value)  # type: ignore[arg-type]
            if got is not None:
                yield key, got

    def finish(self) -> None:
        """``CutMoved`` if a history dropped versions the reads needed."""
        for history in self.histories.values():
            history.check(self.cut)
