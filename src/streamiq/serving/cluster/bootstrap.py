"""A partition this node must restore and never held, copied from a peer instead of
replayed from the changelog (issue 49 item 1), else replayed in a process of its own.

The materializer offers each such partition (its store has no checkpoint: a new node, a
wiped disk, a new standby) to ``Bootstrap`` in a worker thread before it assigns it
(``Materializer._copying``). ``Bootstrap`` asks the replicas that report it restored,
most preferred first, for a snapshot (``cluster/copy.py``, over the peer protocol with
the cluster credential) and has the store take it in (``Store.ingest``: size, SHA-256,
keys and checkpoint checked). The materializer then follows the changelog from the
snapshot's offset. A copy that fails (the peer refuses, dies, sends something that does
not check out) costs one log line and the next replica; when none is left (or
``--no-peer-copy``), the partition is replayed from its changelog by a child process
(``changelog/replayer.py``, ``--restore-processes``), one per core and one more at once,
and taken in as a copy is; when that fails too, the materializer replays it as before.
Nothing is served from a half-taken copy: the store takes in a whole file or nothing,
and the partition answers only once restored, as always.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from ssl import SSLContext

from prometheus_client.core import CounterMetricFamily, Metric

from streamiq.errors import NotActive, StreamiqError
from streamiq.routing.base import Member
from streamiq.serving.changelog.materializer import COPY_MIN_RECORDS
from streamiq.serving.changelog.partition import Replaying, Transfer
from streamiq.serving.changelog.replayer import ReplayFailed, ReplayJob, replay, view_fields
from streamiq.serving.cluster.copy import CopyFailed, fetch_snapshot
from streamiq.serving.node import COPIES, Node
from streamiq.state import SnapshotError

__all__ = ["TRIES", "Bootstrap"]

log = logging.getLogger("streamiq.materializer")

#: replicas asked at most for one partition before the changelog
TRIES = 2
#: any lag: a replica behind is still a copy to follow on from (the changelog catches up)
_ANY_LAG = 1 << 62


class Bootstrap:
    """``(view, partition) -> bool``: copied from a peer and taken in (True), or not."""

    def __init__(self, node: Node, mark: str, ssl: SSLContext | None, *,
                 peers: bool = True, processes: bool = True) -> None:
        self.node = node
        self.mark = mark
        self.ssl = ssl
        self.peers = peers  # copies asked of peers (--peer-copy)
        self.processes = processes  # else replayed in a child (--restore-processes)
        self.replayed = 0  # partitions replayed by a child and taken in
        # made as the node starts: its peers are heard by then (twice their timeout)
        self._hear_by = time.monotonic() + 2 * node.settings.member_timeout_ms / 1000
        self.copied = 0  # partitions taken in from a peer
        self.failed = 0  # copies that failed (each then the next replica or the changelog)
        self.rows = 0  # rows taken in from peers
        node.collectors.append(self.metrics)  # on the node's /metrics

    def __call__(self, view: str, p: int) -> bool:
        try:
            if self.peers and self._copy(view, p):
                return True
        except Exception:  # never fatal: the changelog is there
            log.exception("%s partition %d: copy from a peer failed", view, p)
            self.failed += 1
        if not self.processes or self.node.materializer.stopped:
            return False
        try:
            return self._replay(view, p)
        except Exception:  # never fatal: the materializer replays it
            log.exception("%s partition %d: replay in a process failed", view, p)
            return False

    def _replay(self, view: str, p: int) -> bool:
        """The partition replayed by a child process and taken in (False: it was not;
        the materializer replays it)."""
        node, mat = self.node, self.node.materializer
        topic = mat.topics[view]
        end = mat.ends.now([(topic, p)]).get((topic, p), 0)
        if end < COPY_MIN_RECORDS:
            return False
        scratch = node.state_root() / COPIES / f"replay-{view}-{p}-{uuid.uuid4().hex}"
        job = ReplayJob(kafka={k: v for k, v in node.settings.kafka().items()
                               if isinstance(v, str | int | float | bool)},
                        topic=topic, partition=p, partitions=mat.partitions.get(view),
                        view=view_fields(mat.views[view]), end=end,
                        store=node.settings.store,
                        memory_mb=max(node.settings.store_memory_mb // 2, 16),
                        scratch=str(scratch), into=str(scratch.with_suffix(".snapshot")))
        t0 = time.monotonic()
        node.transfers[(view, p)] = progress = Replaying(end)
        try:
            snap, skips, read = replay(job, progress, lambda: mat.stopped)
            cp = node.stores[view].ingest(snap)
        except (ReplayFailed, SnapshotError, OSError) as exc:
            log.warning("%s partition %d: replay in a process failed (%s); the node "
                        "replays it itself", view, p, str(exc)[:600])
            return False
        finally:
            node.transfers.pop((view, p), None)
            Path(job.into).unlink(missing_ok=True)
            shutil.rmtree(scratch, ignore_errors=True)
        mat.count_skips(view, skips, read)
        self.replayed += 1
        took = time.monotonic() - t0
        log.info("%s partition %d: replayed in a process, %d records in %.2fs (%.0f "
                 "records/s, %d skipped); following the changelog from offset %d", view, p,
                 read, took, read / max(took, 1e-9), skips.total(), cp.offset)
        return True

    def _peers(self, view: str, p: int) -> list[str]:
        """The replicas to ask, most preferred first: those that report the partition
        restored at an offset of ``COPY_MIN_RECORDS`` or more: the materializer offers
        only partitions whose changelog is at least as long (a shorter one restores as
        fast as a copy is made). A node just started has not heard its peers yet
        (their heartbeats come within the member timeout): until then it waits for one
        to report the partition, rather than replay the changelog."""
        node = self.node
        while True:
            members = node.membership.live()
            peers = [e.address for e in node.router.replicas(view, p, _ANY_LAG)
                     if e.address != node.endpoint]
            if peers or time.monotonic() >= self._hear_by or node.materializer.stopped:
                return [a for a in peers if _offset(members.get(a), view, p) >= COPY_MIN_RECORDS
                        ][:TRIES]
            time.sleep(0.1)

    def _copy(self, view: str, p: int) -> bool:
        node = self.node
        peers = self._peers(view, p)
        scratch = node.state_root() / COPIES
        scratch.mkdir(parents=True, exist_ok=True)
        for address in peers:
            into = scratch / f"{view}-{p}-{uuid.uuid4().hex}"
            t0 = time.monotonic()
            node.transfers[(view, p)] = transfer = Transfer(address)  # its progress shown
            try:
                snap = asyncio.run(fetch_snapshot(address, self.mark, self.ssl, view, p,
                                                  node.partitions[view], into,
                                                  transfer=transfer))
                cp = node.stores[view].ingest(snap)
            except (CopyFailed, SnapshotError, StreamiqError, OSError) as exc:
                self.failed += 1
                # a replica that moved the partition on since its heartbeat: routine
                level = logging.INFO if isinstance(exc, NotActive) else logging.WARNING
                log.log(level, "%s partition %d: copy from %s failed (%s); %s", view, p,
                        address, str(exc)[:200] or type(exc).__name__,
                        "the next replica" if address != peers[-1] else "the changelog")
                continue
            finally:
                into.unlink(missing_ok=True)
                node.transfers.pop((view, p), None)
            self.copied += 1
            self.rows += snap.rows
            took = time.monotonic() - t0
            log.info("%s partition %d: copied from %s, %d rows (%d bytes) in %.2fs "
                     "(%.0f rows/s); following the changelog from offset %d", view, p,
                     address, snap.rows, snap.size, took, snap.rows / max(took, 1e-9),
                     cp.offset)
            return True
        return False

    def metrics(self) -> Iterator[Metric]:
        copies = CounterMetricFamily(
            "streamiq_partition_copies", "Partitions this node copied from a peer rather "
            "than replay their changelog: taken in, or failed (then the next replica or the "
            "changelog)", labels=["outcome"])
        copies.add_metric(["copied"], self.copied)
        copies.add_metric(["failed"], self.failed)
        yield copies
        yield CounterMetricFamily(
            "streamiq_partition_replays", "Partitions this node never held replayed from "
            "their changelog by a process of their own and taken in", value=self.replayed)
        yield CounterMetricFamily("streamiq_partition_copied_rows",
                                  "Rows taken in from peers' copies", value=self.rows)


def _offset(member: Member | None, view: str, p: int) -> int:
    """The changelog offset ``member`` reports for the partition (0: none)."""
    report = member.partitions.get(view, {}).get(p) if member is not None else None
    return int(report["offset"]) if report is not None else 0
