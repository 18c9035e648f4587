"""Time from ``streamiq up`` saying "all parts ready" to the first write visible on all nodes.

Each run is a fresh start, as a newcomer's ``make demo`` is: ``streamiq up`` on free
ports with private state, the embedded broker, the bank and orders apps. As soon as
``up`` prints "all parts ready" the benchmark POSTs one bank transaction and one order,
then polls every node until both are visible there. It prints, per run, the time to
"all parts ready" and from it to the first write visible on all nodes, and checks the
target: under 2 s (issue 13).

    python bench/bench_first_write.py [--runs 2] [--nodes 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import free_port, free_run

TARGET_S = 2.0


class Up:
    """``streamiq up`` in its own process group, its output collected."""

    def __init__(self, root: Path, nodes: int) -> None:
        self.ingest, self.node0 = free_port(), free_run(nodes)
        self.nodes = [self.node0 + i for i in range(nodes)]
        argv = [sys.executable, "-m", "streamiq", "up", "--app", "bank,orders",
                "--nodes", str(nodes), "--node-port", str(self.node0),
                "--broker-port", str(free_port()), "--ingest-port", str(self.ingest),
                "--metrics-port", str(free_port()),
                "--state-dir", str(root / "state"), "--checkpoint-dir", str(root / "ckpt")]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def wait_line(self, text: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        tail = "".join(line for _, line in self.lines[-40:])
        raise RuntimeError(f"no {text!r} from streamiq up; output:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def visible_everywhere(client: httpx.Client, up: Up, account: str, amount: int,
                       store: str) -> bool:
    for port in up.nodes:
        base = f"http://127.0.0.1:{port}"
        r = client.get(f"{base}/account/{account}")
        if r.status_code != 200 or r.json()["value"]["balance"] != amount:
            return False
        r = client.get(f"{base}/v1/views/order_counts/keys/{store}|GENERAL")
        if r.status_code != 200 or r.json()["value"]["count"] != 1:
            return False
    return True


def one_run(nodes: int, verbose: bool = False) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="streamiq-first-") as tmp:
        up = Up(Path(tmp), nodes)
        try:
            ready = up.wait_line("all parts ready", 300)
            with httpx.Client(timeout=5) as client:
                r = client.post(f"http://127.0.0.1:{up.ingest}/account/100001?amount=7")
                r.raise_for_status()
                r = client.post(f"http://127.0.0.1:{up.ingest}/orders",
                                json={"order_id": "o1", "store": "s1", "type": "GENERAL",
                                      "amount": 9.5})
                r.raise_for_status()
                deadline = time.monotonic() + 120
                while not visible_everywhere(client, up, "100001", 7, "s1"):
                    if time.monotonic() > deadline:
                        raise RuntimeError("first write not visible on every node in 120 s")
                    time.sleep(0.02)
                seen = time.monotonic()
            return ready - up.started, seen - ready
        finally:
            up.stop()
            if verbose:
                for at, line in up.lines:
                    print(f"{at - up.started:7.2f} {line}", end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2, help="fresh starts to measure")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--verbose", action="store_true", help="print up's output, timed")
    args = ap.parse_args()
    results = []
    for i in range(args.runs):
        to_ready, to_visible = one_run(args.nodes, args.verbose)
        results.append(to_visible)
        print(f"run {i + 1}: all parts ready after {to_ready:.1f} s; first write (bank and "
              f"orders) visible on all {args.nodes} nodes {to_visible:.2f} s later", flush=True)
    worst = max(results)
    verdict = "met" if worst < TARGET_S else "NOT met"
    print(f"ready -> first write visible everywhere: worst {worst:.2f} s over {args.runs} "
          f"fresh starts (target < {TARGET_S:.0f} s: {verdict})")


if __name__ == "__main__":
    main()
