"""Freshness: an ingest POST to its effect visible on all 3 nodes, real-time mode against
micro-batch in one run, bank and orders (all three views running).

Per mode: ingest, 3 nodes and the pipeline (``--app bank,orders``, ``--trigger`` the
mode, everything else the product's defaults) on one broker, topics under a prefix of
their own. Each sample POSTs one write (a bank transaction, or an order) and then asks
every node, side by side, until each answers with it (plain GETs, no position token,
as a user refreshing a page would): the account's balance on all 3 nodes, or the
(store, type) count and its 1-minute window's count on all 3. The sample is the time
from the POST to the last of those answers. One write every ``--pace-ms`` (100 ms).

After each mode's samples, where the time went, from the nodes' own
``streamiq_view_stage_seconds`` histograms (every row each node stored meanwhile, per
view): ``pipeline``, the input record's timestamp to its changelog record's (Spark
reading, folding and its sink producing the row), and ``node``, the changelog record's
timestamp to stored on the node; mean, and p50/p99 as Prometheus' histogram_quantile
estimates them from the buckets (5, 10, 25, 50, 100, 250 ms...). The rest of a sample
is the ingest's acknowledgement and the poll that saw it. The pipeline stage is also
taken exactly ("pipeline exact"), per view, from the changelog records written during
the samples (a consumer of the bench's own: each record's timestamp less its input's).

``--flush-ms 1,5,each``: real-time mode once per value of Spark's
``spark.shuffle.streaming.networkBufferMaxWaitTimeMs`` (how long a streaming shuffle
writer holds records before it flushes) with Spark's 32 KiB buffers (the product's: 1),
or ``each``: ``pipeline/modes.py``'s ``SEND_EACH_ROW`` (a 1-byte buffer, so each row is
sent as it comes, and the flush every 100 ms), or ``row:N``: a 1-byte buffer and the
flush every N ms; each with parts of its own, side by side. Before the samples every
mode's parts idle for ``--idle-s`` (20 s) together: each pipeline's CPU (its process and
Spark's JVM) is printed, what real-time mode costs at rest.

``--minutes M``: afterwards, a real-time run of M minutes (bank and orders alternating)
that crosses batch boundaries (``--realtime-batch-s``, the product's 300 s unless given):
each boundary is a checkpoint during which records wait 0.3-1 s.

``--under-load 1000,5000,20000``: afterwards, real-time mode's samples again (bank and
orders, ``--load-samples`` each) while a paced producer writes that many records a
second straight to the input topics (half bank transactions over 100,000 accounts, half
orders over 10,000 stores: the pipeline's real work, not the ingest's), one rate after
the other, each with its stages and the CPU of the parts meanwhile, printed as it goes: the
pipeline's CPU per record written (above its CPU at rest, ``--idle-s``) is real-time
mode's cost per record at that rate (with ``--flush-ms``, each variant in turn at each
rate); the producer's achieved rate is printed with it. At
most ``--load-budget-s`` (60 s) of samples per app and rate: a pipeline that cannot
keep up makes every sample later than the last (fewer samples then say so), and a write
not visible by the budget's end is cut and said so.

Usage: .venv/bin/python bench/bench_freshness.py [--samples 300] [--minutes 0]
       [--modes real-time,micro-batch] [--realtime-batch-s 300] [--pace-ms 100]
       [--poll-ms 1] [--flush-ms 1,5,each] [--idle-s 20]
       [--under-load 1000,5000,20000] [--load-samples 100] [--load-budget-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_broker, free_port, pct, wait_ready

from streamiq.metrics import Latency

MINUTE = 60_000


def _spawn(cmd: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.Popen([sys.executable, "-m", "streamiq", cmd, *args],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)


def _wait_line(log: Path, text: str, timeout: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} not in {log}")


class Parts:
    """Ingest, 3 nodes and the pipeline of one mode."""

    def __init__(self, bootstrap: str, mode: str, batch_s: int | None, sql: bool = False,
                 label: str | None = None, spark: dict[str, str] | None = None) -> None:
        label = label or mode
        self.root = Path(tempfile.mkdtemp(prefix=f"streamiq-bench-fresh-{label}-"))
        self.mode = mode
        self.prefix = f"{label}."
        common = ["--bootstrap-servers", bootstrap, "--app", "bank,orders",
                  "--log-level", "warning", "--topic-prefix", self.prefix]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ingest = free_port()
        self.procs.append(_spawn("ingest", [*common, "--ingest-port", str(self.ingest)],
                                 self.root / "ingest.log"))
        self.ports = [free_port() for _ in range(3)]
        self.sql_ports = [free_port() for _ in self.ports] if sql else []
        for i, p in enumerate(self.ports):
            more = ["--sql-port", str(self.sql_ports[i])] if sql else []
            self.procs.append(_spawn("node", [*common, "--port", str(p), "--state-dir",
                                              str(self.root / "state"), *more],
                                     self.root / f"node{p}.log"))
        extra = ["--realtime-batch-s", str(batch_s)] if batch_s else []
        if spark:
            extra += ["--spark-config", json.dumps(spark)]
        self.procs.append(_spawn("pipeline", [*common, "--checkpoint-dir",
                                              str(self.root / "ckpt"), "--trigger", mode,
                                              "--metrics-port", "0", *extra],
                                 self.root / "pipeline.log"))

    def ready(self) -> None:
        for p in self.ports:
            wait_ready(p)
        _wait_line(self.root / "pipeline.log", "pipeline ready", 600)

    @property
    def pipeline(self) -> int:
        return self.procs[-1].pid

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(60)


class Writer:
    """Writes through ingest and waits until every node shows each write."""

    def __init__(self, parts: Parts, tag: str, poll_s: float) -> None:
        self.parts = parts
        self.tag = tag
        self.poll_s = poll_s
        self.balances: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.windows: Counter[tuple[str, int]] = Counter()
        self.i = 0

    async def _until(self, c: httpx.AsyncClient, url: str, ok: Any) -> None:
        t0 = time.perf_counter()
        while True:
            r = await c.get(url)
            if r.status_code == 200 and ok(r.json()):
                return
            # every 1 ms at first, then every --poll-ms: a sample is late by at most that,
            # and the polling of 3 nodes does not take the core Spark needs
            late = time.perf_counter() - t0 > 0.05
            await asyncio.sleep(self.poll_s if late else 0.001)

    async def bank(self, c: httpx.AsyncClient) -> float:
        account = f"{self.tag}{self.i % 20}"
        self.i += 1
        t0 = time.perf_counter()
        r = await c.post(f"http://127.0.0.1:{self.parts.ingest}/account/{account}",
                         params={"amount": 1})
        r.raise_for_status()
        self.balances[account] += 1
        want = self.balances[account]
        await asyncio.gather(*(self._until(
            c, f"http://127.0.0.1:{p}/account/{account}",
            lambda d: d["value"]["balance"] == want) for p in self.parts.ports))
        return time.perf_counter() - t0

    async def order(self, c: httpx.AsyncClient) -> float:
        store, kind = f"{self.tag}s{self.i % 5}", ("GENERAL", "RESTAURANT")[self.i % 2]
        self.i += 1
        t0 = time.perf_counter()
        r = await c.post(f"http://127.0.0.1:{self.parts.ingest}/orders",
                         json={"order_id": f"o{self.i}", "store": store, "type": kind,
                               "amount": 1})
        r.raise_for_status()
        key, ts = f"{store}|{kind}", int(r.json()["record"]["ts"])
        start = ts - ts % MINUTE
        self.counts[key] += 1
        self.windows[(key, start)] += 1
        count, wcount = self.counts[key], self.windows[(key, start)]
        waits = []
        for p in self.parts.ports:
            base = f"http://127.0.0.1:{p}/v1/views"
            waits.append(self._until(c, f"{base}/order_counts/keys/{key}",
                                     lambda d, n=count: d["value"]["count"] == n))
            waits.append(self._until(
                c, f"{base}/order_counts_1m/keys/{key}/windows?from={start}&to={start + 1}",
                lambda d, n=wcount: [w["count"] for w in d["windows"]] == [n]))
        await asyncio.gather(*waits)
        return time.perf_counter() - t0


async def _samples(w: Writer, kind: str, n: int, pace: float, warm: int = 5,
                   budget_s: float | None = None, writes: list[int] | None = None
                   ) -> list[float]:
    """``n`` samples after ``warm``; with ``budget_s``, those taken within it (a
    pipeline that cannot keep up makes each later than the last). ``writes`` gets the
    writes made (the warm ones and one cut by the budget too)."""
    out: list[float] = []
    # idle connections closed before the servers close them (uvicorn: after 5 s)
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32, keepalive_expiry=2)
    end = None if budget_s is None else time.monotonic() + budget_s
    async with httpx.AsyncClient(timeout=600, limits=limits) as c:
        for i in range(n + warm):  # the first few warm the path up and are not counted
            if end is not None and time.monotonic() > end:
                break
            sample = w.bank(c) if kind == "bank" else w.order(c)
            if writes is not None:
                writes.append(1)
            try:  # a write not visible by the budget's end is cut: the pipeline is behind
                dt = await asyncio.wait_for(sample, None if end is None else max(
                    1.0, end - time.monotonic()))
            except TimeoutError:
                print(f"  {w.tag}, {kind}: a write not visible on every node by the end of "
                      f"the budget ({budget_s:g} s): the pipeline is behind the load; "
                      f"{len(out)} samples", flush=True)
                break
            if i >= warm:
                out.append(dt)
            await asyncio.sleep(max(0.0, pace - dt))
    return out


async def _minutes(w: Writer, minutes: float, pace: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"bank": [], "orders": []}
    # idle connections closed before the servers close them (uvicorn: after 5 s)
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32, keepalive_expiry=2)
    deadline = time.monotonic() + minutes * 60
    async with httpx.AsyncClient(timeout=600, limits=limits) as c:
        while time.monotonic() < deadline:
            for kind in ("bank", "orders"):
                dt = await (w.bank(c) if kind == "bank" else w.order(c))
                out[kind].append(dt)
                await asyncio.sleep(max(0.0, pace - dt))
    return out


class Load:
    """A paced producer of ``rate`` records a second straight to the input topics of
    ``prefix`` (half bank transactions, half orders), in a thread until ``stop``."""

    def __init__(self, bootstrap: str, prefix: str, rate: int) -> None:
        self.bootstrap, self.prefix, self.rate = bootstrap, prefix, rate
        self.sent = 0
        self.failed = 0
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = 0.0
        self.t1 = 0.0

    def __enter__(self) -> Load:
        self.thread.start()
        time.sleep(3)  # the pipeline at the rate before the samples
        return self

    def __exit__(self, *_: object) -> None:
        self.halt.set()
        self.thread.join(120)

    @property
    def achieved(self) -> float:
        return self.sent / max(self.t1 - self.t0, 1e-9)

    def _run(self) -> None:
        from confluent_kafka import Producer

        def done(err: object, _: object) -> None:
            if err is not None:
                self.failed += 1

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                      "partitioner": "murmur2_random", "queue.buffering.max.messages":
                      1_000_000})
        rng = random.Random(11)
        bank, orders = f"{self.prefix}bank-transactions", f"{self.prefix}orders"
        tick = 0.01
        per_tick = self.rate * tick
        self.t0 = next_at = time.monotonic()
        owed = 0.0
        while not self.halt.is_set():
            owed += per_tick
            now_ms = int(time.time() * 1000)
            while owed >= 1:
                owed -= 1
                if self.sent % 2 == 0:
                    a = f"load{rng.randrange(100_000)}"
                    p.produce(bank, key=a, value=json.dumps(
                        {"account": a, "amount": 1, "ts": now_ms}), on_delivery=done)
                else:
                    st = f"load{rng.randrange(10_000)}"
                    p.produce(orders, key=st, value=json.dumps(
                        {"order_id": f"l{self.sent}", "store": st,
                         "type": ("GENERAL", "RESTAURANT")[self.sent % 4 == 1],
                         "amount": 1, "ts": now_ms}), on_delivery=done)
                self.sent += 1
            p.poll(0)
            next_at += tick
            time.sleep(max(0.0, next_at - time.monotonic()))
        self.t1 = time.monotonic()
        p.flush(60)


def _stages(ports: list[int]) -> dict[tuple[str, str], dict[float, float]]:
    """The nodes' ``streamiq_view_stage_seconds`` summed: (view, stage) -> le -> count
    (``le`` inf included), and (view, stage) -> {-1: sum of seconds}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], dict[float, float]] = {}
    for port in ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for fam in text_string_to_metric_families(text):
            if fam.name != "streamiq_view_stage_seconds":
                continue
            for smp in fam.samples:
                key = (smp.labels["view"], smp.labels["stage"])
                got = out.setdefault(key, {})
                le = (float(smp.labels["le"]) if smp.name.endswith("_bucket")
                      else -1.0 if smp.name.endswith("_sum") else None)
                if le is not None:
                    got[le] = got.get(le, 0.0) + smp.value
    return out


def _since(now: dict[tuple[str, str], dict[float, float]],
           before: dict[tuple[str, str], dict[float, float]]
           ) -> dict[tuple[str, str], dict[float, float]]:
    return {k: {le: n - before.get(k, {}).get(le, 0.0) for le, n in v.items()}
            for k, v in now.items()}


def _latency(b: dict[float, float]) -> Latency:
    """One (view, stage)'s scraped cumulative buckets as a ``Latency`` (its quantiles are
    Prometheus' histogram_quantile, as ``streamiq status`` computes them)."""
    les = sorted(le for le in b if le >= 0)  # +Inf last
    lat = Latency(("x",), tuple(les[:-1]))
    cumulative = [b[le] for le in les]
    lat.counts[("x",)] = [int(c - p) for c, p in zip(cumulative, [0.0, *cumulative[:-1]],
                                                      strict=True)]
    lat.sums[("x",)] = b.get(-1.0, 0.0)
    return lat


def _stage_lines(stages: dict[tuple[str, str], dict[float, float]]) -> list[str]:
    out = []
    chain = {"pipeline": 0, "node": 1}  # the order a write goes through them
    for (view, stage), b in sorted(stages.items(), key=lambda kv: (kv[0][0],
                                                                   chain.get(kv[0][1], 9))):
        lat = _latency(b)
        n = lat.count(("x",))
        p50, p99 = lat.quantile(0.5), lat.quantile(0.99)
        if n and p50 is not None and p99 is not None:
            out.append(f"    {view + ', ' + stage:<28} n={n:5d}  mean "
                       f"{lat.sums[('x',)] / n * 1000:7.1f} ms  p50 ~{p50 * 1000:6.1f} "
                       f"ms  p99 ~{p99 * 1000:7.1f} ms")
    return out


def _cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its descendants (the pipeline and Spark's JVM)."""
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(d.name)], used[int(d.name)] = int(f[1]), (int(f[11]) + int(f[12])) / tick
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [c for c, pp in parent.items() if pp == pid and c not in tree]
    return sum(used.get(p, 0.0) for p in tree)


def _cpu_parts(p: Parts) -> dict[str, float]:
    """CPU seconds so far of the pipeline (with Spark's JVM), the 3 nodes together and
    the ingest."""
    return {"pipeline": _cpu_s(p.pipeline),
            "3 nodes": sum(_cpu_s(q.pid) for q in p.procs[1:1 + len(p.ports)]),
            "ingest": _cpu_s(p.procs[0].pid)}


def _idle(parts: dict[str, Parts], seconds: float) -> dict[str, float]:
    """Each pipeline's CPU (% of a core) over ``seconds`` with nothing written or read."""
    before = {m: _cpu_s(p.pipeline) for m, p in parts.items()}
    time.sleep(seconds)
    return {m: (_cpu_s(p.pipeline) - before[m]) / seconds * 100 for m, p in parts.items()}


def _idle_lines(idle: dict[str, float], seconds: float) -> str:
    return "\n".join(f"  {m}: the pipeline at rest (its process and Spark's JVM, {seconds:g} s, "
                     f"every mode's parts idle) {pct_core:.1f}% of a core"
                     for m, pct_core in idle.items())


def _per_record(pipeline_pct: float, idle_pct: float | None, per_s: float) -> float:
    """The pipeline's CPU per record written (ms), above its CPU at rest when measured
    (``--idle-s``): what a record costs, not what the mode costs with nothing to do."""
    return (pipeline_pct - (idle_pct or 0.0)) / 100 / max(per_s, 1e-9) * 1000


def _cpu_line(cpu: dict[str, float], above_rest: bool) -> str:
    parts = ", ".join(f"{k} {v:.0f}%" for k, v in cpu.items() if k != "per record")
    return (f"CPU {parts} of a core; the pipeline {cpu['per record']:.3f} ms of CPU per "
            "record" + (" (above its rest)" if above_rest else " (its rest included: "
                                                           "--idle-s 0)"))


def _line(label: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return (f"  {label:<28} n={len(ms):5d}  p50 {pct(ms, 50):8.1f} ms  p99 {pct(ms, 99):8.1f} "
            f"ms  max {ms[-1]:8.1f} ms" if ms else f"  {label}: no samples")


class ChangelogWatch:
    """The pipeline stage of every row, exactly: a consumer of the parts' changelogs from
    their ends, each row's record timestamp less its ``TIME_HEADER`` (the input record's
    timestamp; both in ms), per view, while it runs (``with``)."""

    VIEWS = ("balances", "order_counts", "order_counts_1m")

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.seen: dict[str, list[float]] = {v: [] for v in self.VIEWS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ChangelogWatch:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer({"bootstrap.servers": self.bootstrap,
                                   "group.id": f"watch-{self.prefix}", "fetch.wait.max.ms": 10})
        topics = [f"{self.prefix}{v}-changelog" for v in self.VIEWS]
        meta = self._consumer.list_topics(timeout=10).topics
        self._consumer.assign([TopicPartition(t, p, -1) for t in topics if t in meta
                               for p in meta[t].partitions])
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _run(self) -> None:
        from streamiq.views.base import TIME_HEADER

        while not self._stop.is_set():
            for m in self._consumer.consume(500, 0.1):
                if m.error():
                    continue
                ts = dict(m.headers() or ()).get(TIME_HEADER)
                kind, at = m.timestamp()
                if ts is not None and kind:
                    view = m.topic()[len(self.prefix):-len("-changelog")]
                    self.seen.setdefault(view, []).append((at - int(ts)) / 1000)


def _variant(value: str) -> tuple[str, dict[str, str] | None]:
    """A real-time variant (a ``--flush-ms`` value): its name and Spark settings. A
    number N, Spark's 32 KiB buffers flushed every N ms (the product's: N = 1);
    ``each``, each row sent at once and the flush every 100 ms
    (``modes.SEND_EACH_ROW``); ``row:N``, each row sent at once and the flush every N
    ms; ``g1:N``, the product's shuffle with Spark's JVM collecting garbage by G1,
    pauses aimed at N ms (the product's: the parallel collector)."""
    from streamiq.pipeline.modes import SEND_EACH_ROW

    if value == "each":
        return "each row sent at once", dict(SEND_EACH_ROW)
    if value.startswith("g1:"):  # the product's shuffle, Spark's JVM on G1 (pauses <= N ms)
        return f"G1, pauses {value[3:]} ms", {"spark.driver.extraJavaOptions": (
            f"-XX:+UseG1GC -XX:MaxGCPauseMillis={value[3:]} -XX:TieredStopAtLevel=4")}
    if value.startswith("row:"):  # each row sent at once, the flush every N ms
        return f"each row, flush {value[4:]} ms", {
            "spark.shuffle.streaming.networkBufferSize": "1",
            "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": value[4:]}
    return f"flush {value} ms", {"spark.shuffle.streaming.networkBufferSize": "32768",
                                 "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": value}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=300, help="writes per mode and app")
    ap.add_argument("--modes", default="real-time,micro-batch")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="then a real-time run this long (bank and orders alternating)")
    ap.add_argument("--realtime-batch-s", type=int, default=None,
                    help="real-time mode's batch length (default: the product's)")
    ap.add_argument("--pace-ms", type=int, default=100)
    ap.add_argument("--flush-ms", default="",
                    help="real-time mode once per value of spark.shuffle.streaming."
                         "networkBufferMaxWaitTimeMs with Spark's 32 KiB buffers, 'each' "
                         "(each row sent at once, modes.SEND_EACH_ROW) or 'row:N' (each "
                         "row, the flush every N ms), side by side (e.g. 1,each)")
    ap.add_argument("--idle-s", type=float, default=20.0,
                    help="every mode's parts idle this long first: each pipeline's CPU")
    ap.add_argument("--poll-ms", type=float, default=1.0,
                    help="after a sample's first 50 ms, ask the nodes every this many ms "
                         "(1: always every ms, as before; each sample late by at most it)")
    ap.add_argument("--under-load", default="",
                    help="then real-time mode's samples while this many records a second "
                         "are produced straight to the input topics, each rate in turn "
                         "(e.g. 1000,5000,20000)")
    ap.add_argument("--load-samples", type=int, default=100,
                    help="writes per app and rate under --under-load")
    ap.add_argument("--load-budget-s", type=float, default=60.0,
                    help="at most this long sampling per app and rate under --under-load "
                         "(a pipeline behind the load makes every sample later)")
    a = ap.parse_args()
    pace = a.pace_ms / 1000
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the parts stopped, then exit
    results: dict[str, dict[str, list[float]]] = {}
    stages: dict[str, dict[tuple[str, str], dict[float, float]]] = {}
    long: dict[str, list[float]] = {}
    exact: dict[str, dict[str, list[float]]] = {}  # mode -> view -> pipeline stage (s)
    loaded: dict[tuple[str, int], tuple[float, int, dict[str, list[float]], dict[str, float]]] = {}
    with bench_broker() as broker:
        parts = {}
        for m in a.modes.split(","):
            if m == "real-time" and a.flush_ms:
                for ms in a.flush_ms.split(","):
                    name, spark = _variant(ms)
                    parts[f"real-time, {name}"] = Parts(
                        broker.bootstrap_servers, m, a.realtime_batch_s,
                        label=f"rt{ms.replace(':', '')}", spark=spark)
            else:
                parts[m] = Parts(broker.bootstrap_servers, m, a.realtime_batch_s)
        modes = list(parts)
        idle: dict[str, float] = {}
        try:
            for p in parts.values():
                p.ready()
            if a.idle_s:
                idle = _idle(parts, a.idle_s)
                print(_idle_lines(idle, a.idle_s), flush=True)  # as it goes
            for m in modes:  # one mode's parts idle while the other's are measured
                w = Writer(parts[m], f"{m[0]}", a.poll_ms / 1000)
                results[m] = {}
                before = _stages(parts[m].ports)
                with ChangelogWatch(broker.bootstrap_servers, parts[m].prefix) as watch:
                    for k in ("bank", "orders"):
                        results[m][k] = asyncio.run(_samples(w, k, a.samples, pace))
                        print(_line(f"{m}, {k}", results[m][k]), flush=True)  # as it goes
                stages[m] = _since(_stages(parts[m].ports), before)
                exact[m] = watch.seen
            if a.minutes and "real-time" in parts:  # not with --flush-ms
                for m in modes:
                    if m != "real-time":
                        parts.pop(m).stop()
                w = Writer(parts["real-time"], "l", a.poll_ms / 1000)
                long = asyncio.run(_minutes(w, a.minutes, pace))
            rates = [int(r) for r in a.under_load.split(",")] if a.under_load else []
            for rate in rates:  # each real-time variant in turn at each rate
                for m in [m for m in parts if m.startswith("real-time")]:
                    rt = parts[m]
                    w = Writer(rt, f"u{rate}", a.poll_ms / 1000)
                    before = _stages(rt.ports)
                    cpu0, t0 = _cpu_parts(rt), time.monotonic()
                    made: list[int] = []
                    with Load(broker.bootstrap_servers, rt.prefix, rate) as load:
                        got = {k: asyncio.run(_samples(w, k, a.load_samples, pace,
                                                       budget_s=a.load_budget_s,
                                                       writes=made))
                               for k in ("bank", "orders")}
                    stages[f"{m} under {rate}/s"] = _since(_stages(rt.ports), before)
                    took = time.monotonic() - t0
                    cpu = {k: (v - cpu0[k]) / took * 100 for k, v in _cpu_parts(rt).items()}
                    writes = load.sent + len(made)
                    cpu["per record"] = _per_record(cpu["pipeline"], idle.get(m), writes / took)
                    loaded[(m, rate)] = (load.achieved, load.failed, got, cpu)
                    print(f"  {m} under {rate}/s (achieved {load.achieved:.0f}/s): "
                          + "; ".join(_line(k, v).strip() for k, v in got.items())
                          + "; " + _cpu_line(cpu, m in idle), flush=True)  # as it goes
        finally:
            for p in parts.values():
                p.stop()
    print("freshness: ingest POST -> visible on all 3 nodes (plain GETs), bank and orders "
          "(all three views running), one write per "
          f"{a.pace_ms} ms, nodes asked every 1 ms, after 50 ms every {a.poll_ms:g} ms; "
          "targets: real-time p50 <= 50 ms, p99 <= 250 ms; micro-batch p50 <= 400 ms")
    if idle:
        print(_idle_lines(idle, a.idle_s))
    for m, by in results.items():
        for kind, samples in by.items():
            print(_line(f"{m}, {kind}", samples))
        lines = _stage_lines(stages.get(m, {}))
        if lines:
            print(f"  {m}: stages of every row the nodes stored meanwhile (streamiq_view_"
                  "stage_seconds)")
            print("\n".join(lines))
        for view, got in exact.get(m, {}).items():
            mean = sum(got) / len(got) * 1000 if got else 0.0
            print(_line(f"  {view}, pipeline exact", got) + f"  mean {mean:.1f} ms")
    for (m, rate), (achieved, failed, got, cpu) in loaded.items():
        print(f"{m} under load: {rate} records/s produced straight to the input topics "
              f"(achieved {achieved:.0f}/s, {failed} refused), half bank, half orders; "
              + _cpu_line(cpu, m in idle))
        for kind, samples in got.items():
            print(_line(f"under {rate}/s, {kind}", samples))
        lines = _stage_lines(stages.get(f"{m} under {rate}/s", {}))
        if lines:
            print("\n".join(lines))
    if long:
        batch = a.realtime_batch_s or 300
        print(f"real-time, {a.minutes:g} minutes ({a.minutes * 60 / batch:.1f} batches of "
              f"{batch} s: boundaries crossed)")
        for kind, samples in long.items():
            print(_line(f"real-time, {kind}", samples))
        print(_line("real-time, both", long["bank"] + long["orders"]))


if __name__ == "__main__":
    main()
