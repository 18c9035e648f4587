"""Write load: acknowledged writes/s and p50/p99 through the ingest at c=1, 16, 64, its
writes on the lean path against the FastAPI routes (the ingest before issue 47), side by
side in one run, with the pipeline and 3 nodes running; then every acknowledged write
found in the balances.

One broker, one deployment (bench_freshness's: ``--app bank,orders`` as the demo, the
pipeline in real-time mode, 3 nodes) and two ingests on it: ``streamiq ingest`` (lean)
and the same app served
with its writes through the FastAPI routes (``run_ingest(lean=False)``). Rounds
alternate old and new at each concurrency, ``--repeats`` times; wrk POSTs
``/account/{id}?amount=1`` over ``--accounts`` accounts of the round's own for
``--seconds``. Afterwards each round's balances (multi-gets through a node) must add up
to its acknowledged writes, and at most its connections more (a write in flight when wrk
stopped may reach Kafka without its answer being counted); a shortfall is a lost write.

Prints each round (writes/s acknowledged, p50/p99 ms, the ingest's CPU per write, the
load average: the machine may be shared), the medians, and new/old ratios.

Usage: .venv/bin/python bench/bench_write_load.py [--seconds 10] [--repeats 2]
       [--conns 1,16,64] [--accounts 500]
Needs wrk (Debian: apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_broker, free_port, wait_ready
from bench_freshness import Parts
from bench_queries import cpu_s

LUA = """
prefix, n, i, acked = "", 1, 0, 0
local threads = {}
setup = function(thread) table.insert(threads, thread) end
init = function(args) prefix = args[1]; n = tonumber(args[2]); i = math.random(n) end
request = function()
  i = i % n + 1
  return wrk.format("POST", "/account/" .. prefix .. i .. "?amount=1")
end
response = function(status, headers, body) if status == 200 then acked = acked + 1 end end
done = function(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("acked") end
  io.write("ACKED " .. total .. "\\n")
end
"""
OLD = ("import sys; from streamiq.config import Settings; "
       "from streamiq.ingest.app import run_ingest; "
       "run_ingest(Settings(bootstrap_servers=sys.argv[1], app='bank,orders', "
       "topic_prefix='real-time.', "
       "ingest_port=int(sys.argv[2]), log_level='warning'), lean=False)")


class Deployment(Parts):
    """bench_freshness's parts in real-time mode (the ingest, 3 nodes, the pipeline of
    bank and orders: the demo's), and the old ingest beside them."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, "real-time", None)
        old = free_port()
        self.procs.append(_old_ingest(bootstrap, old, self.root / "ingest-old.log"))
        self.ingests = {"new": self.ingest, "old": old}
        self.pids = {"new": self.procs[0].pid, "old": self.procs[-1].pid}

    def ready(self) -> None:
        super().ready()
        for port in self.ingests.values():
            wait_ready(port)

    def balances(self, accounts: list[str]) -> int:
        """The sum of these accounts' balances, through the first node."""
        total = 0
        with httpx.Client(base_url=f"http://127.0.0.1:{self.ports[0]}", timeout=60) as c:
            for i in range(0, len(accounts), 1000):
                r = c.post("/v1/views/balances/keys", json={"keys": accounts[i:i + 1000]})
                r.raise_for_status()
                total += sum(x["value"]["balance"] for x in r.json()["results"] if x["found"])
        return total


def _old_ingest(bootstrap: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.Popen([sys.executable, "-c", OLD, bootstrap, str(port)], env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def wrk(port: int, prefix: str, accounts: int, conns: int, seconds: int,
        script: Path) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", f"-t{min(conns, 2)}", f"-c{conns}", f"-d{seconds}s", "--latency", "-s",
         str(script), f"http://127.0.0.1:{port}", "--", prefix, str(accounts)],
        capture_output=True, text=True, check=False).stdout

    def ms(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m, out
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    acked = int(re.search(r"^ACKED (\d+)$", out, re.M).group(1))  # type: ignore[union-attr]
    return {"acked": acked, "rate": acked / seconds, "p50": ms("50"), "p99": ms("99")}


def settled(d: Deployment, accounts: list[str], acked: int) -> int:
    """The balances' sum once it has reached ``acked`` and stopped moving (or 120 s)."""
    last, deadline = -1, time.monotonic() + 120
    while time.monotonic() < deadline:
        total = d.balances(accounts)
        if total >= acked and total == last:
            return total
        last = total
        time.sleep(2)
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--conns", default="1,16,64")
    ap.add_argument("--accounts", type=int, default=500)
    a = ap.parse_args()
    conns = [int(c) for c in a.conns.split(",")]
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    lost = 0
    with bench_broker() as broker:
        d = Deployment(broker.bootstrap_servers)
        try:
            d.ready()
            script = d.root / "writes.lua"
            script.write_text(LUA)
            for r in range(a.repeats):
                for c in conns:
                    for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
                        prefix = f"{which}{r}c{c}-"
                        c0 = cpu_s([d.pids[which]])
                        got = wrk(d.ingests[which], prefix, a.accounts, c, a.seconds, script)
                        got["cpu_us"] = (cpu_s([d.pids[which]]) - c0) / max(got["acked"], 1) * 1e6
                        accounts = [f"{prefix}{i}" for i in range(1, a.accounts + 1)]
                        total = settled(d, accounts, int(got["acked"]))
                        lost += max(0, int(got["acked"]) - total)
                        results.setdefault((which, c), []).append(got)
                        print(f"  {which} c={c:<3} {got['rate']:8.0f} writes/s acknowledged  "
                              f"p50 {got['p50']:7.2f} ms  p99 {got['p99']:7.2f} ms  "
                              f"{got['cpu_us']:6.0f} us CPU/write  in balances {total} of "
                              f"{int(got['acked'])} (+{total - int(got['acked'])} in flight)"
                              f"  load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            d.stop()
    print("\nmedians (new/old):")
    for c in conns:
        med = {w: {k: statistics.median(x[k] for x in results[(w, c)])
                   for k in ("rate", "p50", "p99", "cpu_us")} for w in ("old", "new")}
        o, n = med["old"], med["new"]
        print(f"  c={c:<3} writes/s {o['rate']:7.0f} -> {n['rate']:7.0f} "
              f"({n['rate'] / o['rate']:.2f}x)  p50 {o['p50']:.2f} -> {n['p50']:.2f} ms  "
              f"p99 {o['p99']:.2f} -> {n['p99']:.2f} ms  CPU/write {o['cpu_us']:.0f} -> "
              f"{n['cpu_us']:.0f} us ({n['cpu_us'] / o['cpu_us']:.2f}x)")
    print(f"acknowledged writes missing from the balances: {lost}")
    if lost:
        raise SystemExit("acknowledged writes were lost")


if __name__ == "__main__":
    main()
