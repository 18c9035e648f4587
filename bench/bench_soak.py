"""Soak: a cluster under a light steady load stays flat (CPU and memory of every part).

Runs ``streamiq up`` (the real supervisor, embedded broker, bank and orders, 3 nodes)
with time compressed for the part that grows with time: heartbeats every 20 ms instead
of 250 ms (12.5x the membership traffic) and the membership period scaled the same way
(4.8 s instead of 60 s), so each real minute carries 12.5 minutes of heartbeats. A
light steady load runs throughout: ``--writes`` bank transactions and orders per second
through ingest and ``--reads`` lookups per second spread over the nodes. CPU (% of one
core, the part's whole process tree: the pipeline's JVM and Python workers included)
and resident memory are measured over a window at the start and one at the end.

    python bench/bench_soak.py [--minutes 6] [--window-s 45] [--period-s 4.8]
                               [--triggers real-time,micro-batch]

``--period-s 86400`` runs the same soak without membership topic rotation.
``--writes 0 --reads 0``: the same parts idle. ``--triggers``: one soak per trigger
mode, one after the other in the same run (real-time tasks hold their slots all the
time: what that costs a laptop, against micro-batch), then both modes' totals.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from bench_first_write import Up

HEARTBEAT_MS = 20
SPEEDUP = 250 / HEARTBEAT_MS


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree(pid: int) -> list[int]:
    todo, out = [pid], []
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def parts(up_pid: int) -> dict[str, int]:
    """Part name -> pid, for the direct children of ``streamiq up``."""
    out = {}
    for pid in _children(up_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "kafka.Kafka" in words:
            out["broker"] = pid
        elif "streamiq" in words and len(words) > words.index("streamiq") + 1:
            cmd = words[words.index("streamiq") + 1]
            if cmd == "node":
                out[f"node:{words[words.index('--port') + 1]}"] = pid
            else:
                out[cmd] = pid
    return out


def measure(up_pid: int, window_s: float) -> dict[str, tuple[float, float]]:
    """Per part: (CPU % of one core over the window, resident MB at its end)."""
    before = {name: {p: cpu_s(p) for p in tree(pid)} for name, pid in parts(up_pid).items()}
    time.sleep(window_s)
    out = {}
    for name, pid in parts(up_pid).items():
        now = {p: cpu_s(p) for p in tree(pid)}
        used = sum(c - before.get(name, {}).get(p, 0.0) for p, c in now.items())
        out[name] = (100 * used / window_s, sum(rss_mb(p) for p in now))
    return out


def load(up: Up, writes: float, reads: float, stop: threading.Event,
         errors: list[str]) -> None:
    if writes + reads <= 0:
        return  # idle: nothing is sent
    rng = random.Random(7)
    step = 1 / (writes + reads)
    n = 0
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                if rng.random() < writes / (writes + reads):
                    n += 1
                    if n % 2:
                        client.post(f"http://127.0.0.1:{up.ingest}/account/a{n % 500}"
                                    "?amount=1").raise_for_status()
                    else:
                        client.post(f"http://127.0.0.1:{up.ingest}/orders",
                                    json={"order_id": f"o{n}", "store": f"s{n % 20}",
                                          "type": "GENERAL", "amount": 1.0}
                                    ).raise_for_status()
                else:
                    port = rng.choice(up.nodes)
                    r = client.get(f"http://127.0.0.1:{port}/account/a{rng.randrange(500)}")
                    if r.status_code not in (200, 404):
                        errors.append(f"GET {port}: {r.status_code}")
            except httpx.HTTPError as exc:
                errors.append(repr(exc))
            stop.wait(max(0.0, step - (time.monotonic() - t0)))


def soak(args: argparse.Namespace, trigger: str
         ) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]], list[str]]:
    """One soak of ``up`` in ``trigger`` mode: the start and end windows, the errors."""
    with tempfile.TemporaryDirectory(prefix="streamiq-soak-") as tmp:
        up = Up(Path(tmp), 3, trigger)
        stop: threading.Event = threading.Event()
        errors: list[str] = []
        try:
            up.wait_line("all parts ready", 300)
            worker = threading.Thread(target=load, args=(up, args.writes, args.reads, stop,
                                                         errors), daemon=True)
            worker.start()
            time.sleep(20)  # the load settles
            start = measure(up.proc.pid, args.window_s)
            rest = args.minutes * 60 - 20 - 2 * args.window_s
            time.sleep(max(0.0, rest))
            end = measure(up.proc.pid, args.window_s)
            stop.set()
            worker.join(15)
        finally:
            up.stop()
    return start, end, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=6.0, help="real minutes of soak")
    ap.add_argument("--window-s", type=float, default=45.0, help="measuring window")
    ap.add_argument("--period-s", type=float, default=60 / SPEEDUP,
                    help="membership period (scaled like the heartbeats)")
    ap.add_argument("--writes", type=float, default=5.0, help="writes per second")
    ap.add_argument("--reads", type=float, default=20.0, help="lookups per second")
    ap.add_argument("--triggers", default="real-time",
                    help="the pipeline's modes, one soak each (real-time,micro-batch)")
    args = ap.parse_args()
    os.environ.update({"STREAMIQ_HEARTBEAT_MS": str(HEARTBEAT_MS),
                       "STREAMIQ_MEMBERSHIP_PERIOD_S": str(args.period_s),
                       "STREAMIQ_LOG_LEVEL": "warning"})
    totals: dict[str, tuple[float, float, float, float]] = {}
    for trigger in args.triggers.split(","):
        start, end, errors = soak(args, trigger)
        simulated = args.minutes * SPEEDUP
        print(f"soak, {trigger}: {args.minutes:g} real min = {simulated:.0f} min of "
              f"heartbeats (heartbeat {HEARTBEAT_MS} ms, membership period "
              f"{args.period_s:g} s); load {args.writes:g} writes/s + {args.reads:g} "
              f"lookups/s; {len(errors)} failed requests")
        print(f"{'part':<12} {'CPU% start':>10} {'CPU% end':>9} {'RSS MB start':>12} "
              f"{'RSS MB end':>10}")
        for name in sorted(start):
            c0, m0 = start[name]
            c1, m1 = end.get(name, (float("nan"), float("nan")))
            print(f"{name:<12} {c0:>10.1f} {c1:>9.1f} {m0:>12.0f} {m1:>10.0f}")
        if errors:
            print("first errors:", errors[:5], file=sys.stderr)
        pipe = end.get("pipeline", (float("nan"), float("nan")))
        totals[trigger] = (pipe[0], pipe[1], sum(c for c, _ in end.values()),
                           sum(m for _, m in end.values()))
    if len(totals) > 1:
        print("end window, per mode: pipeline CPU % / RSS MB; whole demo CPU % / RSS MB")
        for trigger, (pc, pm, tc, tm) in totals.items():
            print(f"  {trigger:<12} pipeline {pc:6.1f} % / {pm:6.0f} MB;   all parts "
                  f"{tc:6.1f} % / {tm:6.0f} MB")


if __name__ == "__main__":
    main()
