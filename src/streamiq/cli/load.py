"""``streamiq load bank|orders``: a paced workload against the ingest service.

Writes ``--count`` deterministic records (``--seed``) at ``--rate`` per second with
``--concurrency`` requests in flight, shows a progress bar on a terminal, and prints
what was acknowledged: per key totals in the view's columns, failures, and the
position token that covers every write (give it to ``streamiq query --position``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from rich.console import Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from streamiq.cli.common import (
    CliError,
    add_address,
    add_token,
    auth_headers,
    console,
    print_json,
    reason,
    rows_table,
)
from streamiq.cli.workload import SCENARIOS, Pacer, Totals, Write

__all__ = ["add_parser", "report", "run"]

HELP = "write a paced, repeatable workload (bank or orders) through the ingest service"


def _positive(kind: type[int] | type[float], minimum: float) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, got {raw}")
        return value
    return parse


def add_parser(sub: Any) -> None:
    p = sub.add_parser("load", help=HELP, description=HELP + ".")
    p.add_argument("scenario", choices=sorted(SCENARIOS), metavar="{bank,orders}",
                   help="bank: POST /account/{id}?amount=N; orders: POST /orders")
    add_address(p, "--ingest", "STREAMIQ_INGEST", "localhost:8080", "The ingest service.")
    add_token(p)
    p.add_argument("--count", type=_positive(int, 1), default=100, metavar="N",
                   help="writes to make [default 100]")
    p.add_argument("--rate", type=_positive(float, 0), default=50.0, metavar="PER_S",
                   help="writes per second, 0 for as fast as ingest answers [default 50]")
    p.add_argument("--keys", type=_positive(int, 1), default=10, metavar="N",
                   help="accounts (100001..) or stores (store-1..) to spread writes over "
                        "[default 10]")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="same seed, same writes [default: random, printed]")
    p.add_argument("--concurrency", type=_positive(int, 1), default=8, metavar="N",
                   help="requests in flight [default 8]")
    p.set_defaults(check=None)
    p.add_argument("--json", action="store_true", help="print the totals as JSON")


async def _check_ingest(http: httpx.AsyncClient, topic: str, scenario: str) -> None:
    base = str(http.base_url).rstrip("/")
    try:
        r = await http.get("/health", timeout=5)
        topics = r.json().get("topics", [])
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the ingest service at {base} ({reason(exc)})") from None
    except (ValueError, AttributeError):
        raise CliError(f"{base} does not look like a streamiq ingest service") from None
    if topic not in topics:
        raise CliError(f"the ingest service at {base} does not take {scenario} writes "
                       f"(its app writes {', '.join(topics) or 'nothing'})")


async def _send(http: httpx.AsyncClient, w: Write, totals: Totals) -> None:
    try:
        r = await http.post(w.path, params=w.params, json=w.body)
    except httpx.HTTPError as exc:
        totals.fail(reason(exc))
        return
    if r.status_code in (401, 403):  # every write would be refused: stop, say why
        raise CliError(f"the ingest service refused the write: "
                       f"{reason(httpx.HTTPStatusError('', request=r.request, response=r))}")
    try:
        answer = r.json() if r.status_code == 200 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        totals.fail(f"HTTP {r.status_code}: {r.text[:200]}")
        return
    totals.ok(w, answer)


async def _drive(args: argparse.Namespace, writes: Iterator[Write], totals: Totals,
                 tick: Callable[[], None], transport: httpx.AsyncBaseTransport | None) -> None:
    """Check the ingest serves the scenario, then write with ``--concurrency`` workers."""
    n = args.concurrency
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    pacer = Pacer(args.rate)
    async with httpx.AsyncClient(base_url=f"http://{args.ingest}", timeout=10, limits=limits,
                                 transport=transport, headers=auth_headers(args)) as http:
        await _check_ingest(http, SCENARIOS[args.scenario][1], args.scenario)

        async def worker() -> None:
            for w in writes:  # shared iterator: each write is taken by one worker
                await asyncio.sleep(pacer.wait())
                await _send(http, w, totals)
                tick()
        await asyncio.gather(*(worker() for _ in range(n)))


def _progress() -> Progress:
    """A bar on stderr, shown only on a terminal (stdout stays the report)."""
    err = console(stderr=True)
    return Progress(TextColumn("[bold]load"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(), console=err,
                    transient=True, disable=not err.is_terminal)


def report(doc: dict[str, Any]) -> Group:
    """The human summary: one line of counts, the per key totals, the positions."""
    rate = doc["sent"] / doc["elapsed_s"] if doc["elapsed_s"] > 0 else 0.0
    head = Text(f"load {doc['scenario']}: {doc['sent']} writes acknowledged in "
                f"{doc['elapsed_s']:.1f} s ({rate:.1f}/s), {doc['failed']} failed, "
                f"seed {doc['seed']}" + (" (interrupted)" if doc["interrupted"] else ""))
    rows = [{doc["key_column"]: k, **v} for k, v in sorted(doc["totals"].items())]
    out: list[Any] = [head]
    if rows:
        out += [Text(f"totals written (view {doc['view']})"), rows_table(rows)]
    out.append(Text(f"last position: {doc['last_position']}"))
    out.append(Text(f"position of every write: {doc['position']}"))
    return Group(*out)


def run(args: argparse.Namespace, transport: httpx.AsyncBaseTransport | None = None) -> int:
    make, _, view, sum_column = SCENARIOS[args.scenario]
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    totals = Totals(sum_column)
    writes = itertools.islice(make(seed, args.keys), args.count)
    started, interrupted = time.monotonic(), False
    with _progress() as bar:
        task = bar.add_task("load", total=args.count, failed=0)

        def tick() -> None:
            bar.update(task, completed=totals.sent + totals.failed, failed=totals.failed)
        try:
            asyncio.run(_drive(args, writes, totals, tick, transport))
        except KeyboardInterrupt:
            interrupted = True
    doc = {"scenario": args.scenario, "ingest": args.ingest, "view": view, "seed": seed,
           "sent": totals.sent, "failed": totals.failed, "first_error": totals.first_error,
           "elapsed_s": round(time.monotonic() - started, 3), "interrupted": interrupted,
           "last_position": totals.last_position, "position": totals.position,
           "key_column": "account" if args.scenario == "bank" else "store|type",
           "totals": totals.keys}
    if args.json:
        print_json(doc)
    else:
        console().print(report(doc))
    if totals.failed:
        raise CliError(f"{totals.failed} of {totals.sent + totals.failed} writes failed; "
                       f"first: {totals.first_error}")
    return 130 if interrupted else 0
