"""SQL startups from one shared address (issue 50): what a startup costs the server, and
how many connections of a client with a token get in while startups that never send a
password cycle from its own address, under the bound before (16: 4 per address) and
now (1,024: 256 per address), side by side in one run.

The server is a ``PgServer`` in a child process (its memory read from /proc), over an
engine with no views: a client that gets in has been authenticated and given a session.
The flood is tests/startupflood.py (``size`` startups from 127.0.0.1 cycling, a process
of its own); the client (psycopg: libpq, as psql) connects ``--tries`` times meanwhile,
on loopback and through tests/delayproxy.py (100 ms each way: a client across a
network, its connections from 127.0.0.1 too).

Usage: .venv/bin/python bench/bench_sql_startups.py [--tries 10] [--held 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import free_port
from startupflood import startup

from streamiq.auth import Principal
from streamiq.errors import Unauthenticated
from streamiq.serving.sql.server import PgServer, ServerBounds

TESTS = Path(__file__).resolve().parents[1] / "tests"
TOKEN = "bench-token"


class _NoViews:
    """An engine with no views: sessions open, nothing is read."""

    async def views(self, principal: Principal) -> Sequence[Any]:
        return []


async def _authenticate(user: str, password: str) -> Principal:
    if password != TOKEN:
        raise Unauthenticated("not the bench token")
    return Principal("bench", frozenset({"views:*"}))


async def _serve(max_startups: int) -> None:
    server = PgServer(_NoViews(), _authenticate,  # type: ignore[arg-type]
                      bounds=ServerBounds(max_startups=max_startups, idle_timeout_s=0))
    print(await server.start("127.0.0.1", 0), flush=True)
    await asyncio.Event().wait()


@contextlib.contextmanager
def _server(max_startups: int) -> Iterator[tuple[int, int]]:
    """(pid, port) of a server in a child process."""
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(max_startups)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        yield child.pid, int(child.stdout.readline())
    finally:
        child.terminate()
        child.wait(30)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@contextlib.contextmanager
def _helper(script: str, *args: object) -> Iterator[subprocess.Popen[str]]:
    """A helper of tests/ in a child process, once it printed its first line."""
    proc = subprocess.Popen([sys.executable, str(TESTS / script), *map(str, args)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def cost(held: int) -> None:
    with _server(4 * held) as (pid, port):  # its address's share: all of them
        warm = [startup(port) for _ in range(50)]  # the server's first allocations
        time.sleep(1)
        for s in warm:
            s.close()
        time.sleep(1)
        before = _rss_kib(pid)
        socks = [startup(port) for _ in range(held)]
        for s in socks:
            assert s.recv(9)[:1] == b"R"  # each is being asked its password
        after = _rss_kib(pid)
        for s in socks:
            s.close()
    print(f"{held} startups held: server RSS +{(after - before) / 1024:.1f} MiB, "
          f"{(after - before) / held:.1f} KiB each")


def flood(max_startups: int, size: int, tries: int, link_s: float) -> str:
    """How many connections of ``tries`` got in (and why the first refused one was)."""
    got, why = 0, ""
    with _server(max_startups) as (_, port), _helper("startupflood.py", port, size), \
            contextlib.ExitStack() as stack:
        if link_s:
            stack.enter_context(_helper("delayproxy.py", link := free_port(), port, link_s))
            port = link
        for _ in range(tries):
            try:
                with psycopg.connect(host="127.0.0.1", port=port, user="bench",
                                     dbname="streamiq", password=TOKEN, sslmode="disable",
                                     connect_timeout=10):
                    got += 1
            except psycopg.OperationalError as exc:
                why = why or str(exc).strip().rsplit("FATAL:", 1)[-1].strip()[:60]
    return f"{got}/{tries} in" + (f" ({why})" if why else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=10, help="client connections per case")
    ap.add_argument("--held", type=int, default=1000, help="startups held to measure cost")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    cost(args.held)
    for link_s in (0.0, 0.1):
        for size in (20, 100, 400):
            cells = [f"bound {bound}: {flood(bound, size, args.tries, link_s)}"
                     for bound in (16, 1024)]
            where = f"{link_s * 1000:.0f} ms link" if link_s else "loopback"
            print(f"flood of {size} from 127.0.0.1, client on {where}: " + "; ".join(cells))

if __name__ == "__main__":
    main()
