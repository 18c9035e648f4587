"""``streamiq query``: a key lookup, a scan or an aggregate, through the smart client.

``streamiq query VIEW KEY`` looks a key up (straight to its owner), ``--scan`` reads
rows in key order (``--start``/``--end``/``--prefix``/``--limit``/``--cursor``) and
``--aggregate`` groups and folds across every partition (``--group-by``, ``--agg``),
``--windows`` lists one key's windows in a windowed view.
Each answer says which node served it and how many hops it took; ``--json`` prints
the node's answer with ``asked`` (the node the client called) and ``hops`` added.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from streamiq.cli.common import (
    CliError,
    add_address,
    add_token,
    cell,
    console,
    print_json,
    rows_table,
)
from streamiq.client import Client, QueryError

__all__ = ["add_parser", "check_args", "render", "run"]

HELP = "look up a key, scan a range or aggregate a view, from any node"
_SCAN = ("start", "end", "cursor", "limit")
_AGG = ("group_by", "agg")
_KEY = ("position", "wait_ms", "max_staleness_ms")
_ALL = (*_KEY, *_SCAN, *_AGG, "prefix", "consistent")
#: the flags each mode takes (besides --node, --max-lag and --json)
_FITS = {"key": _KEY, "scan": (*_SCAN, *_KEY, "prefix", "consistent"),
         "aggregate": (*_AGG, *_KEY, "prefix", "consistent"), "windows": ()}
_NAMES = {"key": "a key lookup", "scan": "--scan", "aggregate": "--aggregate",
          "windows": "--windows"}


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "query", help=HELP, description=HELP + ". Exits 1 when the key is not found.")
    add_address(p, "--node", "STREAMIQ_NODE", "localhost:9001",
                "Any node of the cluster (comma-separate several to try in turn).", several=True)
    add_token(p)
    p.add_argument("view", metavar="VIEW",
                   help="view name, e.g. balances or order_counts (GET /v1/views lists them)")
    p.add_argument("key", metavar="KEY", nargs="?",
                   help="key to look up; columns of a composite key joined by '|'")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--scan", action="store_true", help="rows in key order (paged)")
    mode.add_argument("--aggregate", action="store_true",
                      help="group and fold across all partitions")
    mode.add_argument("--windows", action="store_true",
                      help="every window of KEY in a windowed view (e.g. order_counts_1m)")
    p.add_argument("--start", metavar="KEY", help="--scan: first key (inclusive)")
    p.add_argument("--end", metavar="KEY", help="--scan: end key (exclusive)")
    p.add_argument("--prefix", help="--scan/--aggregate: only keys starting with this")
    p.add_argument("--limit", type=int, metavar="N", help="--scan: page size, 1-1000 [default 100]")
    p.add_argument("--cursor", help="--scan: continue after the page that printed it")
    p.add_argument("--group-by", metavar="COL[,COL]", help="--aggregate: columns to group by")
    p.add_argument("--agg", action="append", metavar="FUNC(COL)",
                   help="--aggregate: count(*), sum/min/max/avg(COL); repeatable "
                        "[default count(*)]")
    p.add_argument("--position", metavar="TOKEN",
                   help="wait until the answer reflects this position (a write's token, "
                        "or an earlier answer's cut)")
    p.add_argument("--wait-ms", type=int, metavar="MS",
                   help="bound on the --position wait [node default 5000]")
    p.add_argument("--max-staleness-ms", type=int, metavar="MS",
                   help="reflect every input record appended more than MS before")
    p.add_argument("--consistent", action="store_true", default=None,
                   help="--scan/--aggregate: exactly the input up to one cut, across "
                        "every partition (the answer names it)")
    p.add_argument("--max-lag", type=int, metavar="RECORDS",
                   help="max changelog lag of the answering replica [node default]")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(check=lambda args: check_args(p, args))
    return p


def _used(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None]


def mode_of(args: argparse.Namespace) -> str:
    """key, scan, aggregate or windows."""
    return next((m for m in ("scan", "aggregate", "windows") if getattr(args, m)), "key")


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Flags that make no sense together: a parser error naming the flag (exit 2)."""
    mode = mode_of(args)
    if mode in ("key", "windows") and args.key is None:
        p.error("give a KEY, or --scan or --aggregate" if mode == "key"
                else "--windows: give the KEY whose windows to list")
    if mode in ("scan", "aggregate") and args.key is not None:
        p.error(f"KEY {args.key!r} is for a key lookup; leave it out with --{mode}")
    wrong = _used(args, tuple(f for f in _ALL if f not in _FITS[mode]))
    if wrong:
        p.error(f"{wrong[0]} does not apply to {_NAMES[mode]}")
    if args.limit is not None and not 1 <= args.limit <= 1000:
        p.error(f"--limit: expected 1-1000, got {args.limit}")
    for flag in ("max_lag", "wait_ms", "max_staleness_ms"):
        if (getattr(args, flag) or 0) < 0:
            p.error(f"--{flag.replace('_', '-')}: must not be negative")


def _ask(c: Client, args: argparse.Namespace) -> dict[str, Any] | None:
    mode = mode_of(args)
    if mode == "scan":
        return c.scan(args.view, start=args.start, end=args.end, prefix=args.prefix,
                      limit=args.limit or 100, cursor=args.cursor, max_lag=args.max_lag,
                      **_fresh(args))
    if mode == "aggregate":
        return c.aggregate(args.view, args.agg or ["count(*)"], group_by=args.group_by,
                           prefix=args.prefix, max_lag=args.max_lag, **_fresh(args))
    if mode == "windows":
        return c.windows(args.view, args.key, max_lag=args.max_lag)
    return c.get(args.view, args.key, max_lag=args.max_lag, position=args.position,
                 wait_ms=args.wait_ms, max_staleness_ms=args.max_staleness_ms)


def _fresh(args: argparse.Namespace) -> dict[str, Any]:
    return {"consistent": bool(args.consistent), "position": args.position,
            "wait_ms": args.wait_ms, "max_staleness_ms": args.max_staleness_ms}


def _served(doc: dict[str, Any]) -> Text:
    text = Text(f"served by {doc.get('served_by', '?')}")
    if "role" in doc:
        text.append(f" ({doc['role']}, lag {doc.get('lag')})")
    text.append(f"; asked {doc['asked']}, {doc['hops']} hop{'s' if doc['hops'] != 1 else ''}",
                style="dim")
    if doc.get("cut"):  # a consistent answer's: --position CUT reads no older one
        text.append(f"\nat cut {doc['cut']}", style="dim")
    return text


def _status(doc: dict[str, Any]) -> Text:
    if "windows" in doc:
        return Text(f"{len(doc['windows'])} windows of {doc.get('key')} "
                    f"(partition {doc.get('partition')})")
    if doc.get("status") == "PARTIAL":
        return Text(f"PARTIAL: partitions {doc.get('missing_partitions')} had no replica "
                    "able to answer", style="bold red")
    return Text(f"{doc.get('status', 'OK')}: {doc.get('partitions', '?')} partitions")


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A scanned row ``{key, partition, value}`` as one table row: key, partition, then
    the value's columns."""
    value = row.get("value")
    if not isinstance(value, dict):
        return row
    return {"key": row.get("key"), "partition": row.get("partition"),
            **{k: v for k, v in value.items() if k not in ("key", "partition")}}


def render(mode: str, doc: dict[str, Any]) -> Group:
    """The human answer: value / rows / groups, then who served it."""
    if mode == "key":
        title = Text(f"{doc['view']} {doc['key']} (partition {doc['partition']})",
                     style="bold")
        table = Table(show_header=False, box=None, pad_edge=False)
        for col, value in doc["value"].items():
            table.add_row(Text(col, style="bold"), cell(value))
        return Group(title, table, _served(doc))
    if mode == "scan":
        rows = [_flat(r) for r in doc["rows"]]
    else:
        rows = doc["windows"] if mode == "windows" else doc["groups"]
    parts: list[Any] = [rows_table(rows) if rows else Text("(no rows)", style="dim"),
                        _status(doc)]
    if mode == "scan" and doc.get("next_cursor"):
        parts.append(Text(f"more: --cursor {doc['next_cursor']}"))
    parts.append(_served(doc))
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    mode = mode_of(args)
    timeout = 10.0 + (args.wait_ms or 5000) / 1000
    try:
        # the token found as auth_headers finds it, the client saying which one a 401 refused
        with Client(args.node, timeout=timeout, token=args.token) as c:
            doc = _ask(c, args)
            last = c.last
    except QueryError as exc:
        raise CliError(str(exc)) from None
    except ConnectionError:
        raise CliError(f"no streamiq node answered at {args.node} (connection refused, "
                       "host unreachable or timed out)") from None
    asked = {"asked": last.node if last else None, "hops": last.hops if last else 0}
    if doc is None:
        if args.json:
            print_json({"status": "NOT_FOUND", "view": args.view, "key": args.key, **asked})
        console(stderr=True).print(Text(f"{args.view}: no key {args.key!r} (asked "
                                        f"{asked['asked']})"))
        return 1
    doc = {**doc, **asked}
    if args.json:
        print_json(doc)
    else:
        console().print(render(mode, doc))
    return 0
