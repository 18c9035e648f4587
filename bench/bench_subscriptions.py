"""Live subscriptions on one node (issue 40): 1,000 concurrent subscribers, one key each
(keys spread over every partition), under a steady write load, in one run.

Setup: an embedded broker on a free port, the ``balances`` changelog with ``--partitions``
partitions, one node (``--log-level warning``). Writes go straight to the changelog (no
pipeline: the write's own freshness is then Kafka plus the node's materializer), each row
carrying its write time in ``last_update`` (ms) and in the ``streamiq-ts`` header, so the
node measures write -> stored (its ``freshness``) and the subscribers write -> received.

Two phases at the same write rate, side by side: first no subscriber, then
``--subscribers`` of them, each reading its key's stream over a raw socket (one asyncio
process; httpx per stream would cost the client more CPU than the node). Printed: the
node's CPU (% of one core) and RSS in each phase; write -> stored p50/p99 (the node's
freshness histogram, per phase); write -> received p50/p99 at the subscribers; the node's
own applied -> handed to HTTP p50/p99 (``streamiq_subscription_delivery_seconds``); and
beyond freshness = received minus stored at p50 and p99 (target <= 10 ms and <= 50 ms).

Usage: .venv/bin/python bench/bench_subscriptions.py [--subscribers 1000] [--rate 200]
       [--seconds 30] [--partitions 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import NodeProc, bench_broker, free_port, pct, stop_all, wait_ready
from confluent_kafka import Producer

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import TIME_HEADER

_EVENT = re.compile(rb'"key":"(k\d+)".*?"last_update":\s*(\d+)')
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _writer(bootstrap: str, topic: str, keys: list[str], rate: float, seconds: float,
            stop: threading.Event) -> threading.Thread:
    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                      "linger.ms": 0})
        t0, n = time.monotonic(), 0
        while not stop.is_set() and time.monotonic() - t0 < seconds:
            now_ms = int(time.time() * 1000)
            k = random.choice(keys)
            p.produce(topic, key=k.encode(), value=json.dumps(
                {"account": k, "balance": n, "count": n, "last_update": now_ms}),
                headers=[(TIME_HEADER, str(now_ms).encode())])
            p.poll(0)
            n += 1
            time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
        p.flush(30)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


async def _subscriber(port: int, key: str, lat: list[float], ready: asyncio.Event,
                      counts: dict[str, int], stop: asyncio.Event) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/views/balances/changes?key={key} HTTP/1.1\r\nHost: x\r\n"
                 f"Accept: text/event-stream\r\n\r\n".encode())
    buf = b""
    seen_ready = False
    try:
        while not stop.is_set():
            data = await reader.read(65536)
            if not data:
                return
            now_ms = time.time() * 1000
            buf += data
            *events, buf = buf.split(b"\n\n")
            for e in events:
                if b"event: ready" in e:
                    seen_ready = True
                    counts["ready"] += 1
                    if counts["ready"] == counts["want"]:
                        ready.set()
                    continue
                m = _EVENT.search(e)
                if m and seen_ready and b'"offset"' in e:
                    lat.append(now_ms - int(m.group(2)))
    finally:
        writer.close()


def _quantiles(port: int, name: str) -> tuple[float, float, int]:
    """p50, p99 (ms) and count of a histogram on the node's /metrics (its buckets)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    buckets = [(float("inf") if le == "+Inf" else float(le), float(n)) for le, n in
               re.findall(rf'^{name}_bucket{{[^}}]*le="([^"]+)"[^}}]*}} (\S+)$', text, re.M)]
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    out = []
    for q in (0.5, 0.99):
        prev_le, prev_n = 0.0, 0.0
        for le, n in buckets:
            if n >= q * total:
                frac = 0 if n == prev_n else (q * total - prev_n) / (n - prev_n)
                out.append(1000 * (prev_le + frac * ((le if le != float("inf") else prev_le)
                                                      - prev_le)))
                break
            prev_le, prev_n = le, n
        else:
            out.append(float("nan"))
    return out[0], out[1], int(total)


def _freshness(port: int) -> dict[str, float]:
    doc = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
    f = doc.get("freshness", {}).get("balances", {})
    return {"count": f.get("count", 0), "buckets": f.get("buckets", []),
            "counts": f.get("counts", [])}


def _between(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """Freshness p50/p99 (ms) of the rows stored between two /health reads."""
    counts = [a - b for a, b in zip(after["counts"], before["counts"] or
                                    [0] * len(after["counts"]), strict=True)]
    bounds = list(after["buckets"])
    total = sum(counts)
    out = []
    for q in (0.5, 0.99):
        seen, lo = 0.0, 0.0
        for i, n in enumerate(counts):
            hi = bounds[i] if i < len(bounds) else lo
            if seen + n >= q * total and n:
                out.append(1000 * (lo + (q * total - seen) / n * (hi - lo)))
                break
            seen += n
            lo = hi
        else:
            out.append(float("nan"))
    return out[0], out[1]


async def _phase(port: int, pid: int, keys: list[str], subscribers: int, write: dict,
                 seconds: float) -> dict[str, object]:
    lat: list[float] = []
    stop = asyncio.Event()
    ready = asyncio.Event()
    counts = {"ready": 0, "want": subscribers}
    tasks = [asyncio.create_task(_subscriber(port, keys[i % len(keys)], lat, ready, counts,
                                             stop)) for i in range(subscribers)]
    if subscribers:
        await asyncio.wait_for(ready.wait(), 300)
    fresh0, cpu0, t0 = _freshness(port), _cpu_s(pid), time.monotonic()
    stop_w = threading.Event()
    w = _writer(write["bootstrap"], write["topic"], keys, write["rate"], seconds, stop_w)
    rss: list[float] = []
    while w.is_alive():
        rss.append(_rss_mb(pid))
        await asyncio.sleep(1)
    await asyncio.sleep(1)  # the last writes delivered
    cpu = (_cpu_s(pid) - cpu0) / (time.monotonic() - t0) * 100
    fresh = _between(fresh0, _freshness(port))
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"cpu": cpu, "rss": max(rss) if rss else float("nan"), "fresh": fresh,
            "lat": lat}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=200.0, help="writes per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--partitions", type=int, default=6)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-subs-"))
    broker = bench_broker().start()
    nodes: list[NodeProc] = []
    try:
        bootstrap = broker.bootstrap_servers
        topic = f"bs-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: a.partitions})
        keys = [f"k{i}" for i in range(a.subscribers)]
        port = free_port()
        nodes.append(NodeProc(port, [
            "--bootstrap-servers", bootstrap, "--cluster", "bs", "--topic-prefix", "bs-",
            "--app", "bank", "--state-dir", str(root / "state"), "--log-level", "warning",
            "--partitions", str(a.partitions), "--changes-max-per-token",
            str(a.subscribers + 10)], root / "node.log"))
        wait_ready(port, 180)
        stop = threading.Event()
        _writer(bootstrap, topic, keys, 5000, len(keys) / 5000 + 1, stop).join()
        write = {"bootstrap": bootstrap, "topic": topic, "rate": a.rate}
        pid = nodes[0].proc.pid
        idle = asyncio.run(_phase(port, pid, keys, 0, write, a.seconds))
        busy = asyncio.run(_phase(port, pid, keys, a.subscribers, write, a.seconds))
        d50, d99, dn = _quantiles(port, "streamiq_subscription_delivery_seconds")
        lat: list[float] = busy["lat"]  # type: ignore[assignment]
        f50, f99 = busy["fresh"]  # type: ignore[misc]
        r50, r99 = pct(lat, 50), pct(lat, 99)
        print(f"bench_subscriptions: {a.subscribers} subscribers, {a.rate:.0f} writes/s for "
              f"{a.seconds:.0f} s, {a.partitions} partitions, load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"  node CPU: {idle['cpu']:.1f} % without subscribers, {busy['cpu']:.1f} % "
              f"with ({busy['cpu'] / max(idle['cpu'], 0.1):.2f}x)")  # type: ignore[operator]
        print(f"  node RSS: {idle['rss']:.0f} MB without, {busy['rss']:.0f} MB with")
        i50, i99 = idle["fresh"]  # type: ignore[misc]
        print(f"  write -> stored (node freshness): p50 {f50:.1f} ms, p99 {f99:.1f} ms "
              f"(without subscribers: {i50:.1f} / {i99:.1f})")
        print(f"  write -> received (subscribers, {len(lat)} changes): p50 {r50:.1f} ms, "
              f"p99 {r99:.1f} ms")
        print(f"  beyond freshness: p50 {r50 - f50:.1f} ms (target <= 10), p99 "
              f"{r99 - f99:.1f} ms (target <= 50)")
        print(f"  node applied -> handed to HTTP ({dn} changes): p50 {d50:.2f} ms, "
              f"p99 {d99:.2f} ms")
    finally:
        stop_all([nodes], broker, root)


if __name__ == "__main__":
    main()
