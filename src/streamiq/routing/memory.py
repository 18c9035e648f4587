"""An in-memory ``Membership``: members set by the caller, no Kafka.

Unit tests (and benchmarks) route with it instead of a hand-rolled fake: a member's
heartbeat is ``heartbeat(endpoint, partitions)``, a clean departure ``leave(endpoint)``,
and with a ``timeout_s`` and a ``clock`` a member not heard from for longer than the
timeout is dead, as with ``KafkaMembership``. This node is always live: its entry
reports what ``report()`` returns, or what it was last given by ``heartbeat``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from streamiq.kafka.skips import Skips
from streamiq.routing.base import Member
from streamiq.routing.heartbeats import Report

__all__ = ["StaticMembership"]

log = logging.getLogger("streamiq.membership")


class StaticMembership:
    """The ``Membership`` protocol over members the caller declares."""

    def __init__(self, endpoint: str, report: Callable[[], Report] | None = None,
                 timeout_s: float = math.inf,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self._report = report
        self._timeout = timeout_s  # members unheard for longer are dead (inf: never)
        self._clock = clock
        self._members: dict[str, Member] = {}
        self._suspects: set[str] = set()  # routed around until heard from again
        self.suspected: list[str] = []  # every endpoint suspect() was told, in order
        self.started = False
        self._silenced = False
        self.skips = Skips(log, "members record")
        self.started_at = time.time()

    @property
    def skipped(self) -> int:
        return self.skips.total

    @property
    def silenced(self) -> bool:
        return self._silenced

    def heartbeat(self, endpoint: str, partitions: Report | None = None,
                  incarnation: str = "static", started_at: float = 0.0) -> None:
        """``endpoint`` is heard from now, holding ``partitions`` (kept by reference:
        a test may change them in place)."""
        self._suspects.discard(endpoint)
        self._members[endpoint] = Member(endpoint, incarnation, self._clock(),
                                         {} if partitions is None else partitions, started_at)

    def leave(self, endpoint: str) -> None:
        """``endpoint`` stops cleanly (its ``leaving`` heartbeat): dropped at once."""
        self._members.pop(endpoint, None)

    def live(self) -> dict[str, Member]:
        now = self._clock()
        out = {e: m for e, m in self._members.items()
               if now - m.seen <= self._timeout and e not in self._suspects}
        own = self._members.get(self.endpoint)
        if self._report is not None or own is None:
            report = self._report() if self._report is not None else {}
            own = Member(self.endpoint, "static", now, report, self.started_at)
        out[self.endpoint] = own
        return out

    def suspect(self, endpoint: str) -> None:
        """Route around ``endpoint`` until its next ``heartbeat``."""
        if endpoint != self.endpoint:
            self._suspects.add(endpoint)
            self.suspected.append(endpoint)

    def start(self) -> None:
        self.started = True

    def silence(self) -> None:
        self._silenced = True

    def stop(self) -> None:
        self._silenced = True
