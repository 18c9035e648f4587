"""Query benchmark, one run (~4 minutes): lookups, multi-get, scatter-gather aggregate.

Setup: an embedded broker on a free port, 100k ``balances`` rows produced straight to
the changelog (3 partitions), 3 nodes (``--standby-replicas 0``, ``--log-level
warning``) and a *ceiling* server: the same HTTP stack (FastAPI on the node's HTTP server,
same settings as a node) answering the same lookup path from an in-process dict.

Load: ``wrk`` (C, one thread, keep-alive) cycling through key paths, so the load
generator is not the bottleneck; every HTTP variant is measured the same way, at
saturation (``-c 16``: throughput, p50, p99) and unloaded (``-c 1``: latency).
The forwarded / local p50 target is checked on paired runs: ``--pairs`` back-to-back
c=1 runs of each (1 s, alternating which goes first), the ratio taken per pair and the
median reported with every pair's value, so a neighbour's burst on this shared
machine skews one pair rather than the whole comparison. Many short pairs rather than
a few long ones: the pairs' spread comes from the host, not from the number of
lookups in a run, so more pairs give a steadier median. The smart client is Python,
so it is compared with raw keep-alive httpx calls to the owner made by the same
asyncio load generator, in ``--client-pairs`` pairs of 2 s.

For scale, the run also times this machine's floor for a hop: a 1-byte round trip
straight to an echo process and through a relay process in between, both on blocking
sockets and doing no work. On a 2-vCPU VM the relayed round trip is already about twice
the direct one, so forwarded / local p50 at c=1 nears that ratio as serving gets faster.

Last, metrics on vs off (issue 15): two more 2-node clusters, one with ``--no-metrics``,
the same key lookups (half local, half forwarded, c=8) to each in ``--metrics-pairs``
back-to-back pairs of alternating order (bench_log_level.paired); the median of the
per-pair ratios is checked against on/off >= 0.95x. With it, the two clusters' server
CPU per lookup (steadier than throughput when a neighbour takes a core) and, in this
process, what recording one lookup costs (``served_of`` and ``Latency.observe``).
``--only-metrics`` runs just that.

First, one line on the lookup wire's two calling conventions (``wire_variants``): a
forwarded lookup on a callback (the pooled hot path, from the HTTP parser) vs awaited
as a coroutine (what a lookup that must connect or wait for a slot takes).

Before / after in one run (``--baseline``): two 2-node clusters, one running a
baseline checkout's code and one this tree's (or ``--current``'s), both through
``PYTHONPATH=<tree>/src`` with the same venv; local and forwarded lookups/s (c=16),
p50s (c=1) and the aggregate's p50 in alternating pairs, after / before per pair
(median)::

    git worktree add /tmp/bq-base <commit>
    .venv/bin/python bench/bench_queries.py --baseline /tmp/bq-base --keys 100000

Usage: .venv/bin/python bench/bench_queries.py [--keys 100000] [--seconds 5]
Needs ``wrk`` (Debian: ``apt-get install -y wrk``). If ``nginx`` is installed (Debian:
``apt-get install -y nginx-light``), one more variant relays the local lookups through
nginx to the owner: the cost of a hop made in C, on the same machine, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import NodeProc, bench_broker, free_port, pct, stop_all, wait_ready
from changelog import produce_rows

from streamiq.client import AsyncClient
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

LUA = """
local paths = {}
local i = 0
init = function(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
  i = math.random(#paths)
end
request = function()
  i = i % #paths + 1
  return wrk.format(nil, paths[i])
end
"""


def rows(n: int) -> list[dict[str, Any]]:
    rnd = random.Random(42)
    return [{"account": f"acct-{i:06d}", "balance": rnd.randint(-1000, 100_000),
             "count": rnd.randint(1, 20), "last_update": 1_700_000_000_000 + i}
            for i in range(n)]


# -- the ceiling: same stack, in-process dict --
def serve_ceiling(port: int, n: int) -> None:
    import socket

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from streamiq._http import install_error_handlers
    from streamiq.serving.http.app import MaxLag, Position, WaitMs
    from streamiq.serving.http.server import HttpServer, run

    data = {r["account"]: r for r in rows(n)}
    app = FastAPI()
    install_error_handlers(app)

    # the node's lookup route declaration (same parameters), answered from a dict
    @app.get("/v1/views/{view}/keys/{key}")
    async def get(view: str, key: str, max_lag: MaxLag = None, position: Position = None,
                  wait_ms: WaitMs = None) -> JSONResponse:
        row = data.get(key)
        if row is None:
            return JSONResponse({"status": "NOT_FOUND"}, status_code=404)
        return JSONResponse({"view": view, "key": key, "partition": 0, "value": row,
                             "served_by": f"127.0.0.1:{port}", "role": "active", "lag": 0},
                            headers={"x-streamiq-served-by": f"127.0.0.1:{port}",
                                     "x-streamiq-hops": "0"})

    @app.get("/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    sock = socket.create_server(("127.0.0.1", port))
    run(HttpServer(app, signals=True).serve(sock))


# -- this machine's floor for a hop: a round trip through a relay doing no work --
def serve_echo(port: int, relay_to: int | None) -> None:
    """Echo every read back on one connection; with ``relay_to``, pass each read to that
    port and relay its answer instead. Blocking sockets: each side sleeps until woken."""
    import socket

    ls = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up = None if relay_to is None else socket.create_connection(("127.0.0.1", relay_to))
    if up is not None:
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(4096):
        if up is not None:
            up.sendall(data)
            data = up.recv(4096)
        conn.sendall(data)


def hop_floor(n: int = 20_000) -> tuple[float, float]:
    """Median round trip (us) straight to an echo process and through a relay process,
    both doing no work: what a hop costs on this machine before any serving code runs."""
    import socket

    def start(port: int, *relay_to: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, __file__, "--serve-echo", str(port),
                                 *relay_to], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc

    out = []
    for relay in (False, True):
        echo, front = free_port(), free_port()
        procs = [start(echo)]
        try:
            if relay:
                procs.append(start(front, "--relay-to", str(echo)))
            with socket.create_connection(("127.0.0.1", front if relay else echo)) as c:
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                lat = []
                for _ in range(n):
                    t = time.perf_counter_ns()
                    c.sendall(b"x")
                    c.recv(16)
                    lat.append((time.perf_counter_ns() - t) / 1e3)
            out.append(pct(lat, 50))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(20)
    return out[0], out[1]


# -- the floor of a hop: nginx (C) relaying to the owner, when nginx is installed --
NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  upstream owner {{ server 127.0.0.1:{upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://owner; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; }}
  }}
}}
"""


def start_nginx(tmp: Path, upstream: int) -> tuple[subprocess.Popen[bytes], int] | None:
    """One nginx process relaying every request to ``upstream`` over keep-alive."""
    if shutil.which("nginx") is None:
        return None
    port = free_port()
    (tmp / "nginx").mkdir(exist_ok=True)
    conf = tmp / "nginx" / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp / "nginx", upstream=upstream, port=port))
    proc = subprocess.Popen(["nginx", "-p", str(tmp / "nginx"), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, 30)
    except BaseException:
        proc.terminate()
        proc.wait(20)
        raise
    return proc, port


# -- wrk --
def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by these processes."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def wrk(url: str, paths: list[str], tmp: Path, conns: int, seconds: float,
        body: Any = None, pids: list[int] | None = None,
        headers: dict[str, str] | None = None) -> dict[str, float]:
    """Throughput, p50/p99 (ms) and server CPU per request (us, summed over ``pids``)."""
    pfile = tmp / f"paths-{random.randrange(1 << 30)}.txt"
    pfile.write_text("\n".join(paths) + "\n")
    script = tmp / "paths.lua"
    lua = LUA
    if body is not None:
        lua = (f"wrk.method = 'POST'\nwrk.body = [[{json.dumps(body)}]]\n"
               "wrk.headers['Content-Type'] = 'application/json'\n" + LUA)
    lua = "".join(f"wrk.headers['{k}'] = '{v}'\n" for k, v in (headers or {}).items()) + lua
    script.write_text(lua)
    c0 = cpu_s(pids or [])
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s",
                          "--latency", "-s", str(script), url, "--", str(pfile)],
                         capture_output=True, text=True, check=False).stdout
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad or "Socket errors" in out:
        print(out)
        for log in sorted(tmp.glob("node-*.log")):
            print(f"--- {log.name} (last lines) ---")
            print("\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        raise SystemExit("wrk saw errors")

    def ms(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m, out
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    cpu = cpu_s(pids or []) - c0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    n = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "p50": ms("50"), "p99": ms("99"), "cpu_us": cpu / max(n, 1) * 1e6}


# -- Python generator for smart client vs raw httpx --
async def pyload(call: Any, keys: list[str], conns: int, seconds: float) -> dict[str, float]:
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        j = i * 7919
        while time.perf_counter() < stop:
            j += 1
            t = time.perf_counter()
            await call(keys[j % len(keys)])
            lat.append((time.perf_counter() - t) * 1e3)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(conns)))
    return {"rps": len(lat) / (time.perf_counter() - t0), "p50": pct(lat, 50),
            "p99": pct(lat, 99)}


async def smart_vs_raw(seeds: str, owner_url: str, keys: list[str], conns: int,
                       seconds: float, pairs: int
                       ) -> tuple[dict[str, float], dict[str, float], list[tuple[float, float]]]:
    """Raw httpx calls to the owner vs the smart client, in back-to-back pairs (order
    alternating): medians of each, and per pair (smart/raw p50, raw/smart throughput)."""
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=64)) as raw, \
            AsyncClient(seeds) as smart:
        await smart.refresh()

        async def raw_get(k: str) -> None:
            r = await raw.get(f"{owner_url}/v1/views/balances/keys/{k}")
            assert r.status_code == 200 and r.headers["x-streamiq-hops"] == "0"
            assert r.json()["key"] == k

        async def smart_get(k: str) -> None:
            doc = await smart.get("balances", k)
            assert doc is not None and smart.last is not None and smart.last.hops == 0

        await pyload(raw_get, keys, conns, 1.0)  # warm both pools
        await pyload(smart_get, keys, conns, 1.0)
        rs: list[dict[str, float]] = []
        ss: list[dict[str, float]] = []
        order = [(raw_get, rs), (smart_get, ss)]
        for i in range(pairs):
            for call, runs in (order if i % 2 == 0 else order[::-1]):
                runs.append(await pyload(call, keys, conns, seconds))

        def med(runs: list[dict[str, float]]) -> dict[str, float]:
            return {m: pct([x[m] for x in runs], 50) for m in runs[0]}

        per_pair = [(sm["p50"] / r["p50"], r["rps"] / sm["rps"])
                    for r, sm in zip(rs, ss, strict=True)]
        return med(rs), med(ss), per_pair


def paired_ratios(url: str, local: list[str], forwarded: list[str], tmp: Path,
                  pairs: int, seconds: float = 1.0) -> list[float]:
    """Forwarded / local p50 at c=1, measured in back-to-back pairs (which goes first
    alternates). The machine is shared: a neighbour's burst lasting a few seconds skews
    a ratio of two medians taken minutes apart, but only the one pair it lands on."""
    out = []
    for i in range(pairs):
        order = [("local", local), ("forwarded", forwarded)]
        p50 = {name: wrk(url, ks, tmp, 1, seconds)["p50"]
               for name, ks in (order if i % 2 == 0 else order[::-1])}
        out.append(p50["forwarded"] / p50["local"])
    return out


def fmt(name: str, m: dict[str, float]) -> str:
    cpu = f"   server CPU {m['cpu_us']:6.0f} us/req" if "cpu_us" in m else ""
    return (f"  {name:<34} {m['rps']:>7.0f} req/s   p50 {m['p50']:7.3f} ms   "
            f"p99 {m['p99']:7.3f} ms{cpu}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    ap.add_argument("--pairs", type=int, default=24,
                    help="paired unloaded local/forwarded 1 s runs for the p50 ratio (median)")
    ap.add_argument("--client-pairs", type=int, default=8,
                    help="paired 2 s runs of raw httpx and the smart client (median)")
    ap.add_argument("--metrics-pairs", type=int, default=16,
                    help="paired 2 s runs with metrics on and off (median)")
    ap.add_argument("--only-metrics", action="store_true",
                    help="run only the metrics on/off comparison")
    ap.add_argument("--baseline", help="a checkout of the code before (git worktree add "
                    "/tmp/bq-base <commit>): run only the before/after lookups side by side")
    ap.add_argument("--current", help="with --baseline: the checkout after (default: this one)")
    ap.add_argument("--pairs-sbs", type=int, default=6,
                    help="with --baseline: back-to-back before/after pairs (median)")
    ap.add_argument("--serve-ceiling", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--serve-echo", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--relay-to", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_ceiling:
        serve_ceiling(a.serve_ceiling, a.keys)
        return
    if a.serve_echo:
        serve_echo(a.serve_echo, a.relay_to)
        return
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install -y wrk)")
    callback_us, coroutine_us = wire_variants()
    print(f"peer protocol, one forwarded lookup at a time (client side, median): on a callback "
          f"{callback_us:.1f} us, as a coroutine {coroutine_us:.1f} us "
          f"({coroutine_us / callback_us:.2f}x): the callback is the pooled hot path, the "
          f"coroutine what a lookup that must connect or wait for a slot takes", flush=True)
    if a.baseline:
        side_by_side(a)
        return
    if not a.only_metrics:
        queries(a)
    metrics_on_off(a)


METRICS_TARGET = 0.95


def metrics_on_off(a: argparse.Namespace) -> None:
    """Lookups/s with metrics on vs off, paired (the cost of recording them)."""
    from bench_log_level import paired  # it imports this module: not at import time

    pa = argparse.Namespace(keys=a.keys, pairs=a.metrics_pairs, seconds=2.0, conns=8)
    cpu: dict[str, list[float]] = {}
    ratios, got = paired(pa, {"on": [], "off": ["--no-metrics"]}, {"on": None, "off": None},
                         cpu)
    med = statistics.median(ratios)
    print(f"metrics: lookups/s (local + forwarded, c=8) on {got['on']:.0f}, off "
          f"{got['off']:.0f}; median of {pa.pairs} paired ratios {med:.2f}x "
          f"(pairs {', '.join(f'{r:.2f}' for r in ratios)}; target >= {METRICS_TARGET}x: "
          f"{'met' if med >= METRICS_TARGET else 'NOT met'})")
    on_cpu, off_cpu = statistics.median(cpu["on"]), statistics.median(cpu["off"])
    print(f"metrics: server CPU per lookup (both nodes, median) on {on_cpu:.0f} us, off "
          f"{off_cpu:.0f} us ({on_cpu / off_cpu:.2f}x); recording one lookup in-process "
          f"{record_cost_us():.2f} us")


def record_cost_us(n: int = 200_000) -> float:
    """What the node's protocol does per lean answer when metrics are on (us, best of 5):
    how it was served, from the headers, then the histogram's bisect and additions."""
    from streamiq.metrics import Latency
    from streamiq.serving.http.metrics import LABELS, served_of

    latency = Latency(LABELS)
    request = [(b"host", b"127.0.0.1:9000"), (b"user-agent", b"wrk")]
    answer = [(b"content-type", b"application/json"), (b"content-length", b"80"),
              (b"x-streamiq-served-by", b"127.0.0.1:9001"), (b"x-streamiq-hops", b"1")]
    t0 = time.perf_counter()

    def record() -> None:
        latency.observe(("lookup", served_of("lookup", request, answer)),
                        time.perf_counter() - t0)

    return min(timeit.repeat(record, number=n, repeat=5)) / n * 1e6


def queries(a: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-queries-"))
    broker = bench_broker().start()
    procs: list[NodeProc] = []
    ceiling: subprocess.Popen[bytes] | None = None
    nginx: tuple[subprocess.Popen[bytes], int] | None = None
    try:
        bootstrap = broker.bootstrap_servers
        topic = f"bq-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
        data = rows(a.keys)
        produce_rows(bootstrap, topic, BALANCES, data)
        ports = [free_port() for _ in range(3)]
        args = ["--bootstrap-servers", bootstrap, "--cluster", "bq", "--topic-prefix", "bq-",
                "--app", "bank", "--state-dir", str(root / "state"), "--log-level", "warning",
                "--standby-replicas", "0"]
        procs = [NodeProc(p, args, root / f"node-{p}.log") for p in ports]
        cport = free_port()
        ceiling = subprocess.Popen([sys.executable, __file__, "--serve-ceiling", str(cport),
                                    "--keys", str(a.keys)])
        for p in ports:
            wait_ready(p, 120)
        wait_ready(cport, 60)
        owners = wait_loaded(ports[0], a.keys)
        nginx = start_nginx(root, ports[0])
        run(a, root, data, ports, cport, owners,
            [n.proc.pid for n in procs], ceiling.pid, nginx)
    finally:
        if nginx is not None:
            nginx[0].terminate()
            nginx[0].wait(20)
        if ceiling is not None:
            ceiling.terminate()
            ceiling.wait(20)
        for n in procs:
            n.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def wait_loaded(port: int, n: int) -> dict[int, str]:
    deadline = time.monotonic() + 180
    while True:
        d = httpx.get(f"http://127.0.0.1:{port}/v1/views/balances/aggregate", timeout=30).json()
        meta = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()
        parts = meta["views"]["balances"]
        if d["status"] == "OK" and d["groups"] and d["groups"][0]["count(*)"] == n and all(
                len(pv["replicas"]) == 1 for pv in parts.values()) and len(meta["nodes"]) == 3:
            return {int(p): pv["replicas"][0]["address"] for p, pv in parts.items()}
        if time.monotonic() > deadline:
            raise TimeoutError(f"not loaded: {d} {meta}")
        time.sleep(0.5)


def run(a: argparse.Namespace, root: Path, data: list[dict[str, Any]], ports: list[int],
        cport: int, owners: dict[int, str], node_pids: list[int], ceiling_pid: int,
        nginx: tuple[subprocess.Popen[bytes], int] | None) -> None:
    secs = a.seconds
    node_a, node_b = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    keys = [r["account"] for r in data]
    sample = random.Random(1).sample(keys, min(len(keys), 20_000))
    own_a = [k for k in sample if owners[BALANCES.partition_of(k, 3)] == node_a]
    own_b = [k for k in sample if owners[BALANCES.partition_of(k, 3)] == node_b]
    assert own_a and own_b, owners

    def paths(ks: list[str]) -> list[str]:
        return [f"/v1/views/balances/keys/{k}" for k in ks]

    # interleaved rounds, median per variant: the machine is shared, so a neighbour's burst
    # hits all variants alike instead of one of them
    runs: dict[str, list[dict[str, float]]] = {}
    variants = [("ceiling", f"http://127.0.0.1:{cport}", own_a, [ceiling_pid]),
                ("local", f"http://{node_a}", own_a, node_pids),
                ("forwarded", f"http://{node_a}", own_b, node_pids)]
    if nginx is not None:  # the same local lookups, relayed by nginx: what a C hop costs
        variants.append(("nginx relay -> local", f"http://127.0.0.1:{nginx[1]}", own_a,
                         [*node_pids, nginx[0].pid]))
    for _round in range(a.rounds):
        for conns, tag in ((16, "loaded"), (1, "unloaded")):
            for name, url, ks, pids in variants:
                runs.setdefault(f"{name} {tag}", []).append(
                    wrk(url, paths(ks), root, conns, secs, pids=pids))
    res: dict[str, dict[str, float]] = {
        k: {m: pct([r[m] for r in v], 50) for m in ("rps", "p50", "p99", "cpu_us")}
        for k, v in runs.items()}
    pair_ratios = paired_ratios(f"http://{node_a}", paths(own_a), paths(own_b), root, a.pairs)
    direct_us, relayed_us = hop_floor()
    mg_keys = random.Random(2).sample(keys, 100)
    res["multi-get 100 keys (c=4)"] = wrk(f"http://{node_a}", ["/v1/views/balances/keys"],
                                          root, 4, secs, body={"keys": mg_keys},
                                          pids=node_pids)
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    raw, smart, client_pairs = asyncio.run(smart_vs_raw(seeds, f"http://{node_a}", own_a, 8,
                                                         2.0, a.client_pairs))
    res["python raw httpx -> owner (c=8)"] = raw
    res["python smart client (c=8)"] = smart

    agg_lat = []
    url = f"http://{node_a}/v1/views/balances/aggregate"
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("group_by", "count"), ("agg", "sum(balance)"), ("agg", "avg(balance)"),
        ("agg", "count(*)")]
    with httpx.Client(timeout=60) as c:
        for _ in range(8):
            t = time.perf_counter()
            d = c.get(url, params=params).json()
            agg_lat.append((time.perf_counter() - t) * 1e3)
            assert d["status"] == "OK" and d["rows"] == a.keys, d
    truth = sum(r["balance"] for r in data)
    assert sum(g["sum(balance)"] for g in d["groups"]) == truth

    print(f"\nbench_queries: {a.keys} keys, 3 partitions, 3 nodes, wrk -t1, {secs:.0f}s per "
          f"run, median of {a.rounds} interleaved rounds (lookups)\n")
    for name, m in res.items():
        print(fmt(name, m))
    print(f"  {'aggregate over all keys (3 nodes)':<34} p50 {pct(agg_lat, 50):.1f} ms   "
          f"max {max(agg_lat):.1f} ms   ({a.keys / pct(agg_lat, 50) * 1e3:,.0f} rows/s)")
    ratios = [
        ("local / ceiling throughput (loaded, wall)",
         res["local loaded"]["rps"] / res["ceiling loaded"]["rps"], ">= 0.70"),
        ("local / ceiling capacity (server CPU/req)",
         res["ceiling loaded"]["cpu_us"] / res["local loaded"]["cpu_us"], ">= 0.70"),
        ("forwarded / local server CPU per request",
         res["forwarded loaded"]["cpu_us"] / res["local loaded"]["cpu_us"], "(info)"),
        (f"forwarded / local p50 (unloaded, median of {len(pair_ratios)} pairs)",
         pct(pair_ratios, 50), "<= 2.0"),
        ("forwarded / local p50 (unloaded, medians above)",
         res["forwarded unloaded"]["p50"] / res["local unloaded"]["p50"], "(info)"),
        ("forwarded / local p50 (loaded)",
         res["forwarded loaded"]["p50"] / res["local loaded"]["p50"], "(info)"),
        ("zero-work relay / direct round trip (p50)", relayed_us / direct_us,
         f"(info: this machine's hop floor, {direct_us:.0f} vs {relayed_us:.0f} us)"),
        *([("nginx relay / local p50 (unloaded)",
            res["nginx relay -> local unloaded"]["p50"] / res["local unloaded"]["p50"],
            "(info: a hop in C)")] if nginx is not None else []),
        (f"smart client / raw owner p50 (median of {len(client_pairs)} pairs)",
         pct([x[0] for x in client_pairs], 50), "<= 1.10"),
        ("raw owner / smart client throughput (pairs)",
         pct([x[1] for x in client_pairs], 50), "<= 1.10"),
    ]
    print("  (server CPU: all 3 nodes summed for node variants, so forwarded counts both hops)")
    print("\nratios:")
    for name, value, target in ratios:
        print(f"  {name:<48} {value:6.2f}   target {target}")
    print(f"  (forwarded/local pairs, {sum(r <= 2.0 for r in pair_ratios)} of {len(pair_ratios)} "
          f"<= 2.0: {', '.join(f'{r:.2f}' for r in sorted(pair_ratios))})")
    print(f"  (smart/raw p50 pairs: "
          f"{', '.join(f'{r:.2f}' for r in sorted(x[0] for x in client_pairs))})")


# -- before / after in one run: a baseline checkout's nodes beside this tree's --
def side_by_side(a: argparse.Namespace) -> None:
    """Two 2-node clusters on one broker and one changelog, one running the code of
    ``--baseline`` (a checkout: ``git worktree add /tmp/bq-base <commit>``), one the code
    of ``--current`` (default: this checkout), each through ``PYTHONPATH=<tree>/src``.
    Local and forwarded lookups to the first node of each, in back-to-back pairs whose
    order alternates: throughput at c=16 and p50 at c=1, medians, and after / before
    taken per pair (median), so a neighbour's burst skews one pair, not the comparison."""
    from bench_log_level import wait_loaded as loaded

    trees = {"before": Path(a.baseline).resolve(),
             "after": Path(a.current).resolve() if a.current else Path(__file__).parents[1]}
    root = Path(tempfile.mkdtemp(prefix="bench-sbs-"))
    broker = bench_broker().start()
    clusters: dict[str, list[NodeProc]] = {}
    nginx: tuple[subprocess.Popen[bytes], int] | None = None
    try:
        topic = f"sb-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": broker.bootstrap_servers}, {topic: 3})
        data = rows(a.keys)
        produce_rows(broker.bootstrap_servers, topic, BALANCES, data)
        for name, tree in trees.items():
            args = ["--bootstrap-servers", broker.bootstrap_servers, "--cluster", name,
                    "--topic-prefix", "sb-", "--app", "bank", "--state-dir",
                    str(root / name), "--log-level", "warning", "--standby-replicas", "0"]
            clusters[name] = [NodeProc(free_port(), [*args, "--sql-port", str(free_port())],
                                       root / f"{name}-{i}.log",
                                       env={"PYTHONPATH": str(tree / "src")})
                              for i in range(2)]
        for nodes in clusters.values():
            for n in nodes:
                wait_ready(n.port, 180)
            loaded(nodes[0].port, a.keys)
        keys = [r["account"] for r in data]
        paths = {name: split_paths(nodes[0].port, keys) for name, nodes in clusters.items()}
        # the relay floor: nginx relaying the after cluster's local lookups to their owner
        nginx = start_nginx(root, clusters["after"][0].port)
        runs: dict[tuple[str, str, str], list[float]] = {}
        for i in range(a.pairs_sbs):
            for name in (trees if i % 2 == 0 else list(trees)[::-1]):
                nodes = clusters[name]
                url = f"http://127.0.0.1:{nodes[0].port}"
                for kind, ps in paths[name].items():
                    loaded_run = wrk(url, ps, root, 16, a.seconds)
                    unloaded = wrk(url, ps, root, 1, 1.0)
                    runs.setdefault((name, kind, "rps"), []).append(loaded_run["rps"])
                    runs.setdefault((name, kind, "p50"), []).append(unloaded["p50"])
                    runs.setdefault((name, kind, "p50 c16"), []).append(loaded_run["p50"])
                runs.setdefault((name, "aggregate", "p50"), []).append(
                    aggregate_p50(f"{url}/v1/views/balances/aggregate", 5))
                for what, ms in gathers(url, keys).items():
                    runs.setdefault((name, what, "ms"), []).append(ms)
                for kind, ms in sql_lookups(nodes[0], paths[name]).items():
                    runs.setdefault((name, f"SQL lookup {kind} p50", "ms"), []).append(ms)
            if nginx is not None:
                relayed = wrk(f"http://127.0.0.1:{nginx[1]}", paths["after"]["local"], root,
                              1, 1.0)
                runs.setdefault(("nginx", "relay", "p50"), []).append(relayed["p50"])
        print(f"\nbefore / after, one run: {trees['before']} vs {trees['after']}, "
              f"{a.pairs_sbs} pairs, {a.seconds:.0f} s at c=16 (lookups/s), 1 s at c=1 (p50)")
        for kind in ("local", "forwarded"):
            b_rps, n_rps = runs[("before", kind, "rps")], runs[("after", kind, "rps")]
            b_p50, n_p50 = runs[("before", kind, "p50")], runs[("after", kind, "p50")]
            ratio = statistics.median(n / b for n, b in zip(n_rps, b_rps, strict=True))
            print(f"  {kind:<9} lookups/s before {statistics.median(b_rps):7.0f}  after "
                  f"{statistics.median(n_rps):7.0f}  after/before {ratio:.2f}x (target >= "
                  f"0.95: {'met' if ratio >= 0.95 else 'NOT met'}; pairs "
                  f"{', '.join(f'{n / b:.2f}' for n, b in zip(n_rps, b_rps, strict=True))})")
            print(f"  {kind:<9} p50 (c=1)   before {statistics.median(b_p50):.3f} ms  after "
                  f"{statistics.median(n_p50):.3f} ms  after/before "
                  f"{statistics.median(n / b for n, b in zip(n_p50, b_p50, strict=True)):.2f}x")
            b16, n16 = runs[("before", kind, "p50 c16")], runs[("after", kind, "p50 c16")]
            print(f"  {kind:<9} p50 (c=16)  before {statistics.median(b16):.3f} ms  after "
                  f"{statistics.median(n16):.3f} ms  after/before "
                  f"{statistics.median(n / b for n, b in zip(n16, b16, strict=True)):.2f}x")
        b_agg, n_agg = runs[("before", "aggregate", "p50")], runs[("after", "aggregate", "p50")]
        agg_ratios = [n / b for n, b in zip(n_agg, b_agg, strict=True)]
        print(f"  aggregate over {a.keys} keys (2 nodes, p50 of 5 a pair) before "
              f"{statistics.median(b_agg):.1f} ms  after {statistics.median(n_agg):.1f} ms  "
              f"after/before {statistics.median(agg_ratios):.2f}x (pairs "
              f"{', '.join(f'{r:.2f}' for r in agg_ratios)})")
        if nginx is not None:
            relay = statistics.median(runs[("nginx", "relay", "p50")])
            fwd = statistics.median(runs[("after", "forwarded", "p50")])
            met = "met" if fwd <= 1.1 * relay else "NOT met"
            print(f"  forwarded p50 (c=1) after / nginx relay p50 {fwd:.3f} / {relay:.3f} ms = "
                  f"{fwd / relay:.2f}x (target <= 1.10: {met})")
        else:
            print("  (nginx not installed: no relay floor; apt-get install -y nginx-light)")
        for what in (*GATHERS, "SQL lookup local p50", "SQL lookup forwarded p50"):
            b_ms, n_ms = runs[("before", what, "ms")], runs[("after", what, "ms")]
            print(f"  {what:<36} before {statistics.median(b_ms):7.1f} ms  after "
                  f"{statistics.median(n_ms):7.1f} ms  after/before "
                  f"{statistics.median(n / b for n, b in zip(n_ms, b_ms, strict=True)):.2f}x")
        sent = 0
        for n in clusters["after"]:
            doc = httpx.get(f"http://127.0.0.1:{n.port}/health", timeout=10).json()
            sent += sum(doc["peers"]["hedges"]["sent"].values())
        print(f"  hedges sent by the after cluster over the whole run: {sent}")
    finally:
        if nginx is not None:
            nginx[0].terminate()
            nginx[0].wait(20)
        stop_all(clusters.values(), broker, root)


def sql_lookups(node: NodeProc, paths: dict[str, list[str]], n: int = 400
                ) -> dict[str, float]:
    """p50 (ms) of ``n`` one-key SELECTs over the PostgreSQL wire (psycopg, one
    connection, extended protocol), of local and of forwarded keys."""
    import psycopg

    out = {}
    with psycopg.connect(host="127.0.0.1", port=node.sql_port, dbname="streamiq",
                         password="any", sslmode="disable", autocommit=True) as conn:
        for kind, ps in paths.items():
            keys = [p.rsplit("/", 1)[1] for p in ps[:n]]
            conn.execute("SELECT balance FROM balances WHERE account = %s", (keys[0],))
            lat = []
            for k in keys:
                t = time.perf_counter()
                row = conn.execute("SELECT balance FROM balances WHERE account = %s",
                                   (k,)).fetchone()
                lat.append((time.perf_counter() - t) * 1e3)
                assert row is not None, k
            out[kind] = pct(lat, 50)
    return out


GATHERS = ("aggregate over all keys", "multi-get 1000 keys", "scan page of 1000 keys")


def gathers(url: str, keys: list[str]) -> dict[str, float]:
    """One of each scatter-gather over the cluster's keys (ms): an aggregate over all
    of them, a multi-get of 1000, a scan page of 1000."""
    out = {}
    with httpx.Client(timeout=120) as c:
        for what, call in zip(GATHERS, (
                lambda: c.get(f"{url}/v1/views/balances/aggregate",
                              params={"agg": ["sum(balance)", "count(*)"]}),
                lambda: c.post(f"{url}/v1/views/balances/keys", json={"keys": keys[:1000]}),
                lambda: c.get(f"{url}/v1/views/balances/scan", params={"limit": 1000})),
                strict=True):
            t = time.perf_counter()
            r = call()
            out[what] = (time.perf_counter() - t) * 1e3
            assert r.status_code == 200 and r.json()["status"] == "OK", r.text[:300]
    return out


def aggregate_p50(url: str, n: int) -> float:
    """p50 (ms) of ``n`` aggregates (group by count: count(*), sum(balance), avg(balance))."""
    params = {"group_by": "count", "agg": ["count(*)", "sum(balance)", "avg(balance)"]}
    lat = []
    with httpx.Client(timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            assert c.get(url, params=params).status_code == 200
            lat.append((time.perf_counter() - t) * 1e3)
    return pct(lat, 50)


def split_paths(port: int, keys: list[str], n: int = 10_000) -> dict[str, list[str]]:
    """Lookup paths of keys the node at ``port`` owns (local) and of keys its peer owns
    (forwarded)."""
    meta = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()
    mine = {int(p) for p, pv in meta["views"]["balances"].items()
            if pv["assigned"][0] == meta["self"]}
    local = [k for k in keys if BALANCES.partition_of(k, 3) in mine][:n]
    other = [k for k in keys if BALANCES.partition_of(k, 3) not in mine][:n]
    assert local and other, meta
    return {kind: [f"/v1/views/balances/keys/{k}" for k in ks]
            for kind, ks in (("local", local), ("forwarded", other))}


# -- why the peer protocol's client has two calling conventions --
def wire_variants(n: int = 20_000) -> tuple[float, float]:
    """Median us per forwarded lookup, one at a time, on one pooled peer connection to
    an owner answering at once: ``HopClient.call`` (on a callback, from the entry's
    HTTP parser) vs ``await HopClient.fetch`` (a coroutine: what a lookup that must
    connect or wait for a slot uses). The callback is why both stay."""
    from types import SimpleNamespace

    from streamiq.serving.cluster.hop import HopClient
    from streamiq.serving.cluster.wire import PREFACE, reply_frame, request_body
    from streamiq.serving.peer.server import PeerConnection

    row = b'{"view":"balances","key":"acct-000001","value":{"balance":1}}'

    class Answering:
        gate = SimpleNamespace(is_mark=lambda got: got == b"1")

        def handle(self, rid: int, budget_ms: int, body: bytes, write: Any,
                   waiting: Any = None) -> None:
            write(reply_frame(rid, 200, row))

    class Owner(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.conn = PeerConnection(Answering(), transport,  # type: ignore[arg-type]
                                       asyncio.get_running_loop(), 60.0)
            self.head = True

        def data_received(self, data: bytes) -> None:
            if self.head:
                data, self.head = data[len(PREFACE):], False
            self.conn.feed(data)

    async def measure() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Owner, "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        hop = HopClient()
        body = request_body("lookup", {"view": "balances", "key": "acct-000001"}, [0], 3, None)
        await hop.fetch(address, body, loop.time() + 10)  # one pooled connection
        fetch_us, call_us = [], []
        for _ in range(n):
            t = time.perf_counter()
            await hop.fetch(address, body, loop.time() + 10)
            fetch_us.append((time.perf_counter() - t) * 1e6)
            done = loop.create_future()
            t = time.perf_counter()
            assert hop.call(address, body, loop.time() + 10,
                            lambda r, e, done=done, t=t: done.set_result(
                                (time.perf_counter() - t) * 1e6))
            call_us.append(await done)
        hop.close()
        server.close()
        return pct(call_us, 50), pct(fetch_us, 50)

    return asyncio.run(measure())


if __name__ == "__main__":
    main()
