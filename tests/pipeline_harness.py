"""Run ``python -m streamiq pipeline`` as a subprocess and read its changelog."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from procs import SHORT_BATCHES, free_port

from streamiq.pipeline.runner import READY_LINE
from streamiq.views.base import MARKER_HEADER, MARKER_KEY

__all__ = [
    "PipelineProcess", "changelog_state", "dead_letter_docs", "input_ends", "read_topic",
    "wait_caught_up",
]

HERE = Path(__file__).parent
#: where the pipeline subprocess finds its ``--views-module`` (views_for_tests); its
#: PYTHONPATH also has this folder (user_query), as when the two were side by side
VIEWS_DIR = HERE / "integration" / "pipeline"


class PipelineProcess:
    """One pipeline subprocess (its own session: JVM and Python workers die with it).

    ``cmd``: another program that prints the ready line (default ``streamiq pipeline``
    with ``views_for_tests`` and real-time batches of 10 s: these tests wait for the
    markers a batch's end writes)."""

    def __init__(self, bootstrap: str, checkpoint: Path, suffix: str, log: Path,
                 topic_prefix: str = "", cmd: list[str] | None = None) -> None:
        self.cmd = cmd or [sys.executable, "-m", "streamiq", "pipeline", "--bootstrap-servers",
                           bootstrap, "--checkpoint-dir", str(checkpoint), "--views-module",
                           "views_for_tests", "--partitions", "3",
                           "--topic-prefix", topic_prefix,
                           "--metrics-port", str(free_port()),  # never the default 9400
                           *SHORT_BATCHES]
        self.env = {**os.environ, "SIQ_TEST_SUFFIX": suffix, "PYTHONPATH": os.pathsep.join(
            [str(VIEWS_DIR), str(HERE), os.environ.get("PYTHONPATH", "")])}
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self.ready = threading.Event()

    def start(self, timeout: float = 180.0, wait: bool = True) -> PipelineProcess:
        """``wait=False``: started, not waited for (start other things meanwhile, then
        :meth:`wait_ready`): two Spark starts overlap."""
        err = self.log.open("a")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                     stderr=err, text=True, start_new_session=True)
        self.ready.clear()
        proc = self.proc

        def watch() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(READY_LINE):
                    self.ready.set()

        threading.Thread(target=watch, daemon=True).start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Until the ready line; a process that exits or stays silent is killed."""
        proc = self.proc
        assert proc is not None
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.2):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"pipeline not ready; log:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:])

    def kill(self) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers) and reap it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        _wait_group_gone(self.proc.pid)
        self.proc = None

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.kill()
        return rc


def _wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def read_topic(bootstrap: str, topic: str, timeout: float = 15.0) -> list[Any]:
    """Every record of ``topic`` (up to its high watermark), in partition/offset order."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamiq-test-read",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 20})
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.2):
                if m.error():  # the end of a partition
                    part = m.partition()
                    if part is not None:
                        done.add(part)
                else:
                    out.append(m)
        assert len(done) == len(parts), f"could not read {topic} to its end"
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        c.close()


def dead_letter_docs(bootstrap: str, topic: str, want: int,
                     timeout: float = 60.0) -> list[dict[str, Any]]:
    """The dead-letter topic's records, once it holds ``want`` (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        docs = [json.loads(m.value()) for m in read_topic(bootstrap, topic)]
        if len(docs) >= want or time.monotonic() > deadline:
            return docs
        time.sleep(0.5)


def input_ends(bootstrap: str, topic: str) -> dict[str, int]:
    """``{"partition": high watermark}`` of ``topic`` (counted, not ListOffsets)."""
    ends: dict[str, int] = {}
    for m in read_topic(bootstrap, topic):
        ends[str(m.partition())] = m.offset() + 1
    return ends


def is_marker(m: Any) -> bool:
    """A changelog record is a marker by its header (its key is MARKER_KEY)."""
    return dict(m.headers() or []).get(MARKER_HEADER) == b"1"


def changelog_state(msgs: list[Any]) -> tuple[dict[str, dict[str, Any]], dict[int, list[Any]]]:
    """(last value per key, markers per partition) of changelog records."""
    last: dict[str, dict[str, Any]] = {}
    markers: dict[int, list[Any]] = {}
    for m in msgs:
        if is_marker(m):
            assert m.key() == MARKER_KEY  # compacted topics keep the last one
            markers.setdefault(m.partition(), []).append(json.loads(m.value()))
        else:
            last[m.key().decode()] = json.loads(m.value())
    return last, markers


def wait_caught_up(bootstrap: str, changelog: str, ends: dict[str, int], topic: str,
                   partitions: int, timeout: float = 120.0) -> list[Any]:
    """Wait until every changelog partition has a marker covering ``ends``."""
    deadline = time.monotonic() + timeout
    while True:
        msgs = read_topic(bootstrap, changelog)
        _, markers = changelog_state(msgs)
        if len(markers) == partitions and all(
                ms[-1]["offsets"].get(topic) == ends for ms in markers.values()):
            return msgs
        if time.monotonic() > deadline:
            last = {p: ms[-1] for p, ms in markers.items()}
            raise AssertionError(f"changelog not caught up with {ends}: {last}")
        time.sleep(0.5)
