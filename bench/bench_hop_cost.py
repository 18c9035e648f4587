"""Where a forwarded lookup's time goes, against nginx relaying a local lookup: one run.

Two nodes (this tree), 20k ``balances`` rows, nginx relaying to the first node. First
the Python each role spends per lookup, in process (``lean_cost.py``). Then, for each of
``--rounds`` rounds, wrk at c=1 for ``--seconds`` on: forwarded lookups (entry node ->
owner over the peer protocol), local lookups relayed by nginx (nginx -> the node over
HTTP), the same relayed by the least a Python hop can do (``pyrelay.py``: bytes passed
on unparsed, uvloop), forwarded lookups through the least a Python entry can do
(``pyforward.py``: parse, hash, one peer frame to the same owner, relay), the same with
10 us of busy CPU added per request (what a microsecond of the entry's work costs at
c=1), and local lookups; printed: p50 and the CPU each process spent per request (its
background threads included, spread over the requests). Then ``strace -c`` on the entry
node under forwarded load, on nginx under relayed load and on the owner: syscalls per
request by kind (docs/design.md, "The HTTP server").

Usage: .venv/bin/python bench/bench_hop_cost.py [--rounds 3] [--seconds 3]
Needs wrk, nginx and strace (Debian: apt-get install -y wrk nginx-light strace).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import lean_cost
from _common import NodeProc, bench_broker, free_port, stop_all, wait_ready
from bench_log_level import wait_loaded
from bench_queries import cpu_s, rows, split_paths, start_nginx, wrk
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

KEYS = 20_000


def straced(pid: int, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``run()`` while ``strace -c -f`` counts the syscalls of ``pid`` (printed after)."""
    out = Path(tempfile.mktemp(prefix="strace-"))
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)],
                              stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        return run()
    finally:
        tracer.terminate()
        tracer.wait(10)
        summary = out.read_text()
        out.unlink()
        print(summary)


def start_pyrelay(upstream: int) -> tuple[subprocess.Popen[str], int]:
    """``pyrelay.py`` relaying to ``upstream``: the least a Python hop does."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "pyrelay.py"),
                             str(port), str(upstream)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc, port


def start_pyforward(owner: int, spin_us: float = 0.0) -> tuple[subprocess.Popen[str], int]:
    """``pyforward.py`` forwarding to the node on ``owner``: the least a Python entry does."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "pyforward.py"),
                             str(port), str(owner), "--spin-us", str(spin_us)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc, port


def measure(a: argparse.Namespace, root: Path, nodes: list[NodeProc],
            nginx: tuple[subprocess.Popen[bytes], int],
            pyrelay: tuple[subprocess.Popen[str], int],
            pyforwards: list[tuple[subprocess.Popen[str], int]]) -> None:
    paths = split_paths(nodes[0].port, [r["account"] for r in rows(KEYS)])
    entry, owner = nodes[0], nodes[1]
    url, relay = f"http://127.0.0.1:{entry.port}", f"http://127.0.0.1:{nginx[1]}"
    assert entry.proc is not None and owner.proc is not None
    (bare, bare_port), (spun, spun_port) = pyforwards
    variants: list[tuple[str, str, list[str], dict[str, int]]] = [
        ("forwarded", url, paths["forwarded"], {"entry": entry.proc.pid,
                                                "owner": owner.proc.pid}),
        ("nginx -> local", relay, paths["local"], {"nginx": nginx[0].pid,
                                                   "owner": entry.proc.pid}),
        ("pyrelay -> local", f"http://127.0.0.1:{pyrelay[1]}", paths["local"],
         {"pyrelay": pyrelay[0].pid, "owner": entry.proc.pid}),
        ("pyforward", f"http://127.0.0.1:{bare_port}", paths["forwarded"],
         {"pyforward": bare.pid, "owner": owner.proc.pid}),
        ("pyforward +10us", f"http://127.0.0.1:{spun_port}", paths["forwarded"],
         {"pyforward": spun.pid, "owner": owner.proc.pid}),
        ("local", url, paths["local"], {"node": entry.proc.pid})]
    for name, us in lean_cost.measure().items():
        print(f"{name:<20} {us:5.1f} us of Python per lookup (in process, no syscalls)")
    for i in range(a.rounds):
        for name, u, ps, pids in variants:
            before = {k: cpu_s([p]) for k, p in pids.items()}
            got = wrk(u, ps, root, 1, a.seconds)
            n = got["rps"] * a.seconds
            cpu = "  ".join(f"{k} {(cpu_s([p]) - before[k]) / n * 1e6:5.1f}"
                            for k, p in pids.items())
            print(f"round {i} {name:<15} p50 {got['p50'] * 1000:6.1f} us   CPU us/request: "
                  f"{cpu}", flush=True)
    for name, pid, u, ps in (("entry node, forwarded", entry.proc.pid, url, paths["forwarded"]),
                             ("nginx, relaying", nginx[0].pid, relay, paths["local"]),
                             ("owner node, peer requests", owner.proc.pid, url,
                              paths["forwarded"])):
        print(f"\nstrace -c of the {name} ({a.seconds:.0f} s at c=1):")
        got = straced(pid, lambda u=u, ps=ps: wrk(u, ps, root, 1, a.seconds))  # type: ignore[misc]
        print(f"  ~{got['rps'] * a.seconds:.0f} requests")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-hop-"))
    broker = bench_broker().start()
    nodes: list[NodeProc] = []
    nginx = None
    pyrelay: tuple[subprocess.Popen[str], int] | None = None
    pyforwards: list[tuple[subprocess.Popen[str], int]] = []
    try:
        topic = f"hc-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": broker.bootstrap_servers}, {topic: 3})
        produce_rows(broker.bootstrap_servers, topic, BALANCES, rows(KEYS))
        args = ["--bootstrap-servers", broker.bootstrap_servers, "--cluster", "hc",
                "--topic-prefix", "hc-", "--app", "bank", "--state-dir", str(root / "s"),
                "--log-level", "warning", "--standby-replicas", "0"]
        nodes = [NodeProc(free_port(), args, root / f"node-{i}.log") for i in range(2)]
        for n in nodes:
            wait_ready(n.port, 180)
        wait_loaded(nodes[0].port, KEYS)
        nginx = start_nginx(root, nodes[0].port)
        if nginx is None:
            raise SystemExit("nginx not found (Debian: apt-get install -y nginx-light)")
        pyrelay = start_pyrelay(nodes[0].port)
        pyforwards = [start_pyforward(nodes[1].port), start_pyforward(nodes[1].port, 10.0)]
        measure(a, root, nodes, nginx, pyrelay, pyforwards)
    finally:
        for proc, _ in pyforwards:
            proc.terminate()
            proc.wait(20)
        if pyrelay is not None:
            pyrelay[0].terminate()
            pyrelay[0].wait(20)
        if nginx is not None:
            nginx[0].terminate()
            nginx[0].wait(20)
        stop_all([nodes], broker, root)


if __name__ == "__main__":
    main()
