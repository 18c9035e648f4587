"""The SQL front end's wire codecs and framing, the library against the hand-written code
it replaced (issue 38), side by side in one run, ratios printed.

* Rows: psycopg's dumpers (``serving/sql/codecs.row_encoder``) against the hand codecs
  the front end had before (``str``/``repr`` per value in text; ``struct`` per value in
  binary, which had no numeric): a lookup's one row and a 10,000-row answer of
  (text, bigint, double), in text and in binary. Numeric, which the hand codecs could not
  send in binary at all, is timed with psycopg alone.
* Framing: an extended-protocol round (Parse, Bind, Describe, Execute, Sync in; RowDescription,
  DataRow, CommandComplete, ReadyForQuery out) through pygwire's BackendConnection (its
  state machine checks each message's phase) and through its decoder alone (what
  ``protocol.Wire`` uses: the state machine refused a Query before Sync).

Each variant runs ``--rounds`` times, alternating, best-of reported (us per call).

Usage: .venv/bin/python bench/bench_sql_codecs.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import decimal
import math
import struct
import time
from collections.abc import Callable
from typing import Any

from pygwire import BackendConnection, FrontendConnection, TransactionStatus
from pygwire import messages as m
from pygwire.codec import FrontendMessageDecoder
from pygwire.constants import ConnectionPhase

from streamiq.serving.sql.codecs import row_encoder

TYPES = ("VARCHAR", "BIGINT", "DOUBLE")
_I8, _F8 = struct.Struct("!q"), struct.Struct("!d")


def hand_text(v: Any) -> bytes:
    """The front end's text encoder before psycopg's (types.encode_text, abridged)."""
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, float):
        if math.isnan(v):
            return b"NaN"
        return repr(v).encode()
    return str(v).encode()


HAND_BINARY: list[Callable[[Any], bytes]] = [str.encode, _I8.pack, _F8.pack]


def best(fn: Callable[[], Any], rounds: int, inner: int) -> float:
    """The fastest of ``rounds`` runs of ``inner`` calls, in microseconds per call."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner * 1e6)
    return min(times)


def rows_bench(rounds: int) -> None:
    one = [("acc-000123", 123, 45.5)]
    many = [(f"acc-{i:06d}", i, i * 0.5) for i in range(10_000)]
    for fmt, name in ((0, "text"), (1, "binary")):
        for rows, label, inner in ((one, "1 row", 20_000), (many, "10,000 rows", 3)):
            def lib(rows: list[tuple[Any, ...]] = rows, fmt: int = fmt) -> None:
                enc = row_encoder(TYPES, [fmt])
                for r in rows:
                    enc.encode(r)

            def hand(rows: list[tuple[Any, ...]] = rows, fmt: int = fmt) -> None:
                for r in rows:
                    if fmt:
                        [f(v) for f, v in zip(HAND_BINARY, r, strict=True)]
                    else:
                        [hand_text(v) for v in r]
            t_lib, t_hand = best(lib, rounds, inner), best(hand, rounds, inner)
            print(f"rows {name:6} {label:11}  psycopg {t_lib:10.1f} us  hand {t_hand:10.1f} us"
                  f"  psycopg/hand {t_lib / t_hand:5.2f}")
    numeric = [(decimal.Decimal(i),) for i in range(10_000)]

    def lib_numeric() -> None:
        enc = row_encoder(("DECIMAL(38,0)",), [1])
        for r in numeric:
            enc.encode(r)
    print(f"rows binary numeric 10,000 rows: psycopg {best(lib_numeric, rounds, 3):.1f} us "
          "(the hand codecs refused it: 22023)")


def _client_batch() -> bytes:
    front = FrontendConnection(initial_phase=ConnectionPhase.READY)
    return b"".join(front.send(x) for x in (
        m.Parse(statement="", query="SELECT balance FROM balances WHERE account = $1"),
        m.Bind(param_formats=[0], param_values=[b"acc-1"], result_formats=[0]),
        m.Describe(kind="P", name=""), m.Execute(), m.Sync()))


def framing_bench(rounds: int) -> None:
    batch = _client_batch()
    out = [m.RowDescription(fields=[m.FieldDescription(name="balance", type_oid=1700)]),
           m.DataRow(columns=[b"123"]), m.CommandComplete(tag="SELECT 1"),
           m.ReadyForQuery(status=TransactionStatus.IDLE)]

    def machine() -> None:
        conn = BackendConnection(initial_phase=ConnectionPhase.READY)
        list(conn.receive(batch))
        for x in out:
            conn.send(x)

    def decoder() -> None:
        dec = FrontendMessageDecoder()
        dec.phase = ConnectionPhase.READY
        dec.feed(batch)
        list(dec)
        for x in out:
            x.to_wire()
    t_sm, t_dec = best(machine, rounds, 20_000), best(decoder, rounds, 20_000)
    print(f"framing one extended round: state machine {t_sm:.1f} us  decoder alone "
          f"{t_dec:.1f} us  decoder/state machine {t_dec / t_sm:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    rows_bench(args.rounds)
    framing_bench(args.rounds)


if __name__ == "__main__":
    main()
