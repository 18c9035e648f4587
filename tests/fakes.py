"""Small fakes shared by unit tests."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from streamiq.serving.node import Parts


class Message:
    """A consumed Kafka record as confluent-kafka's ``Message`` reads (no error)."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, headers: list[tuple[str, bytes]] | None = None,
                 timestamp: tuple[int, int] = (0, -1)) -> None:
        self._t, self._p, self._o, self._k, self._v, self._h = (
            topic, partition, offset, key, value, headers)
        self._ts = timestamp  # (type, epoch ms): (0, -1) none, (1, ms) the producer's

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._h

    def error(self) -> None:
        return None


class Clock:
    """A monotonic clock the test moves by hand (``clock.now += 1.5``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingTransport:
    """Stands in for an asyncio transport: records writes, remembers being closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed


class FakeIngestProducer:
    """Stands in for the ingest's Kafka producer: records what would be produced."""

    sent: list[tuple[str, str, dict[str, Any]]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        pass

    async def send(self, topic: str, key: str, value: dict[str, Any]) -> tuple[int, int]:
        json.dumps(value, allow_nan=False)  # what reaches the topic is plain JSON
        self.sent.append((topic, key, value))
        return 0, len(self.sent) - 1

    def produce(self, topic: str, key: str, value: dict[str, Any],
                then: Callable[[int, int, Exception | None], None]) -> None:
        """The lean path's way in: ``then`` runs on the loop, as a delivery report would."""
        json.dumps(value, allow_nan=False)
        self.sent.append((topic, key, value))
        asyncio.get_running_loop().call_soon(then, 0, len(self.sent) - 1, None)

    def close(self) -> None:
        pass


def offline_parts(partitions: dict[str, int], materializer: Any,
                  endpoint: str = "127.0.0.1:1") -> Parts:
    """A node's parts that never reach Kafka: ``materializer`` (a test's), no stores, an
    in-memory membership of this node alone, a router over it, a catalog never started."""
    from streamiq.routing.memory import StaticMembership
    from streamiq.routing.router import Router
    from streamiq.serving.changelog.discovery import Discovery
    from streamiq.serving.node import Parts
    from streamiq.supervise import Supervisor

    membership = StaticMembership(endpoint)
    return Parts(partitions, topics={}, stores={}, materializer=materializer,
                 membership=membership, router=Router(membership, partitions, 0),
                 discovery=Discovery({}, "catalog", lambda spec: None, Supervisor()))


def fake_ivy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: list[str],
             fail: str | None = None) -> Path:
    """A ``java`` (through JAVA_HOME) that records its arguments and copies the jars
    ``java -jar ivy.jar ... -retrieve <dir>/[artifact]...`` would; the argument log."""
    home, log = tmp_path / "jdk", tmp_path / "java.args"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "java"
    body = (f"echo '{fail}'; exit 1" if fail else
            f"for n in {' '.join(names)}; do echo jar > \"$dir/$n\"; done")
    script.write_text(f"""#!/bin/sh
echo "$@" > {log}
for a in "$@"; do
  [ "$prev" = -ivy ] && cp "$a" {tmp_path}/ivy.xml
  [ "$prev" = -settings ] && cp "$a" {tmp_path}/ivysettings.xml
  [ "$prev" = -retrieve ] && dir="${{a%/*}}"
  prev="$a"
done
{body}
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("JAVA_HOME", str(home))
    return log
