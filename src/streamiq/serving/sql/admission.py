"""``Startups``: the SQL connections not authenticated yet, and which one makes room
when they are too many.

A startup (a socket, an asyncio task, a decoder: 3.2 KiB of the node's memory measured,
``bench/bench_sql_startups.py``) is cheap, so the bound is large
(``--sql-max-startups``, 1,024; a quarter of it per client address) and a connection
past it does not wait: the oldest startup of its address (or, when all startups are
taken, of the busiest address) that has **not answered** its password request is closed
to make room (first one that has sent nothing yet, as a connection its client reset
before the server read it). A startup whose password has arrived is being checked and is
never closed for another; a newcomer finding only such startups is refused. So a client
that answers promptly is closed only if a quarter of the bound of newer startups from
its own address arrive during its password round trip: a flood of fewer connections from
its address (a NAT, a proxy, a BI server) never closes it, however fast they cycle; and
startups that never send a password cannot lock anyone out, as each newcomer closes one
of them. Each startup also has ``--sql-startup-timeout-s`` to finish.

The bound must fit the process's open files: ``fd_room`` raises the soft limit toward
the hard one (as Go and the JVM do at start) and keeps the startups within half the
limit less the sessions.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass, field

from streamiq.errors import Overloaded

__all__ = ["Startup", "Startups", "fd_room"]

log = logging.getLogger("streamiq.sql")


@dataclass(eq=False)
class Startup:
    """One connection until its session opens (or it ends). ``close`` ends it with the
    error its client is sent."""

    address: str
    close: Callable[[Overloaded], None] = field(repr=False)
    started: bool = False  # a message arrived (one reset before it was read: never)
    answered: bool = False  # its password arrived: being checked, never closed for another


class Startups:
    """The startups, per client address in arrival order."""

    def __init__(self, bound: int, per_address: int) -> None:
        self.bound = bound
        self.per_address = per_address
        self._by_address: dict[str, dict[int, Startup]] = {}
        self._count = 0
        self.evicted = 0  # startups closed to make room, for /metrics

    def __len__(self) -> int:
        return self._count

    def admit(self, address: str, close: Callable[[Overloaded], None]) -> Startup:
        """Count a new connection, first closing an unanswered startup when its
        address's share or the bound is full; ``Overloaded`` when no startup there
        may be closed (all are being checked)."""
        mine = self._by_address.get(address, {})
        if len(mine) >= self.per_address:
            self._make_room(mine)
        elif self._count >= self.bound:
            self._make_room(max(self._by_address.values(), key=len))
        startup = Startup(address, close)
        self._by_address.setdefault(address, {})[id(startup)] = startup
        self._count += 1
        return startup

    def done(self, startup: Startup) -> None:
        """The startup ended (a session, an error, a timeout, closed to make room)."""
        held = self._by_address.get(startup.address)
        if held is None or held.pop(id(startup), None) is None:
            return
        self._count -= 1
        if not held:
            del self._by_address[startup.address]

    def _make_room(self, startups: dict[int, Startup]) -> None:
        silent = (s for s in startups.values() if not (s.started or s.answered))
        victim = next(silent, None) or next(
            (s for s in startups.values() if not s.answered), None)
        if victim is None:
            raise Overloaded("too many connections are authenticating (--sql-max-startups), "
                             "all of them answering: try again", max_startups=self.bound)
        self.done(victim)
        self.evicted += 1
        victim.close(Overloaded("too many connections are authenticating "
                                "(--sql-max-startups): this one had not answered its "
                                "password request and waited longest"))


def fd_room(startups: int, sessions: int) -> int:
    """How many of ``startups`` the open-file limit allows: the soft limit is raised
    (up to the hard one) to twice startups and sessions, and startups get at most half
    of it less the sessions (the other half: Kafka, RocksDB, HTTP)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * (startups + sessions)
    if soft != resource.RLIM_INFINITY and soft < want and (
            hard == resource.RLIM_INFINITY or soft < hard):
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    room = startups if soft == resource.RLIM_INFINITY else max(2, min(
        startups, soft // 2 - sessions))
    if room < startups:
        log.warning("SQL: %d startups at most, not %d (--sql-max-startups): the open-file "
                    "limit is %d (ulimit -n)", room, startups, soft)
    return room
