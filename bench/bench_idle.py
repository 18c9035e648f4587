"""The demo at rest: what ``streamiq up`` costs with nothing written or read.

``streamiq up --fresh`` is started as a user starts it (an empty folder, the demo's own
ports: nothing else may hold them), waited for until it prints "all parts ready", left
to settle (``--settle-s``, so the JVMs' compilers are done), and then the CPU of each of
its parts is read from ``/proc`` over ``--window-s``: the broker, the pipeline (its
Python process and Spark's JVM), each node, the ingest and ``up`` itself, with the
busiest threads, and the resident memory of them all. Issue 47's target: the whole
demo under 15% of a core.

``--baseline TREE``: the demo from a checkout of the code before (``git worktree add
/tmp/idle-base <commit>``, run through ``PYTHONPATH=TREE/src`` with this venv) and from
this tree, alternately (before, after, after, before...) ``--rounds`` times each; the
medians and after / before are printed. ``--spark-config JSON``: likewise, this tree's
demo as it is and with ``up --spark-config JSON`` (e.g. ``pipeline/modes.py``'s
``SEND_EACH_ROW``, ``--spark-config each``).

Usage: .venv/bin/python bench/bench_idle.py [--settle-s 60] [--window-s 60]
       [--baseline /tmp/idle-base | --spark-config each] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
DEMO_PORTS = (8080, 9001, 9002, 9003, 9092)


def _stat(pid: int | str, task: str | None = None) -> list[str]:
    path = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    text = Path(path).read_text()
    return [text[text.index("(") + 1:text.rindex(")")], *text.rsplit(")", 1)[1].split()]


def _tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                children.setdefault(int(_stat(d)[2]), []).append(int(d))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _part(pid: int) -> str:
    """Which part of the demo a process is, from its command line."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "kafka.Kafka" in cmd:
        return "broker"
    if "java" in cmd.split(" ", 1)[0] or " pipeline " in cmd:
        return "pipeline"
    for name in ("node", "ingest"):
        if f"streamiq {name} " in cmd:
            port = cmd.split("--port ", 1)[1].split(" ", 1)[0] if " --port " in cmd else ""
            return f"{name} {port}".strip()
    return "up"


def _ticks(pids: list[int]) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, thread) -> (thread name, CPU ticks so far)."""
    out = {}
    for pid in pids:
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                f = _stat(pid, task)
                out[(pid, int(task))] = (f[0], int(f[12]) + int(f[13]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def measure(tree: Path | None, args: list[str], settle_s: float, window_s: float
            ) -> dict[str, float]:
    """One demo from ``tree``'s code (None: this venv's), ``up --fresh *args``: % of a
    core per part over the window (and ``total``, and ``rss_gb``)."""
    busy = [p for p in DEMO_PORTS if _in_use(p)]
    if busy:
        sys.exit(f"bench_idle: the demo's ports {busy} are in use (stop the running demo)")
    folder = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    env = {**os.environ, "PYTHONPATH": str(tree / "src")} if tree else dict(os.environ)
    log = (folder / "up.log").open("wb")
    up = subprocess.Popen([sys.executable, "-m", "streamiq", "up", "--fresh", *args],
                          cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while b"all parts ready" not in (folder / "up.log").read_bytes():
            if up.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "up.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"bench_idle: the demo did not come up:\n{tail}")
            time.sleep(1)
        time.sleep(settle_s)
        pids = _tree(up.pid)
        part = {pid: _part(pid) for pid in pids}
        before = _ticks(pids)
        time.sleep(window_s)
        after = _ticks(pids)
        rss = 0
        for pid in pids:
            try:
                rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
            except OSError:
                continue
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        log.close()
    parts: dict[str, float] = {}
    threads: list[tuple[float, str]] = []
    for key, (name, ticks) in after.items():
        if key not in before:
            continue
        pct = (ticks - before[key][1]) / HZ / window_s * 100
        where = part[key[0]]
        parts[where] = parts.get(where, 0.0) + pct
        threads.append((pct, f"{where}: {name}"))
    for pct, what in sorted(threads, reverse=True)[:8]:
        print(f"    {pct:5.1f}%  {what}")
    parts["total"] = sum(parts.values())
    parts["rss_gb"] = rss / 1e9
    return parts


def _in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _line(name: str, parts: dict[str, float]) -> str:
    order = sorted((k for k in parts if k not in ("total", "rss_gb")),
                   key=lambda k: (k.split(" ")[0], k))
    return (f"  {name}: total {parts['total']:.1f}% of a core ("
            + ", ".join(f"{k} {parts[k]:.1f}%" for k in order)
            + f"); resident {parts['rss_gb']:.2f} GB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settle-s", type=float, default=60.0,
                    help="after 'all parts ready', wait this long before measuring")
    ap.add_argument("--window-s", type=float, default=60.0, help="the measured window")
    ap.add_argument("--baseline", help="a checkout of the code before: measured too, "
                                       "alternating with this tree")
    ap.add_argument("--spark-config", help="this tree's demo also with up --spark-config "
                                           "JSON ('each': pipeline/modes.py's SEND_EACH_ROW)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="with --baseline or --spark-config: rounds each")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the demo stopped, then exit
    trees: dict[str, tuple[Path | None, list[str]]] = {"this tree": (None, [])}
    if a.baseline:
        trees = {"before": (Path(a.baseline).resolve(), []), "after": (None, [])}
    elif a.spark_config:
        from streamiq.pipeline.modes import SEND_EACH_ROW

        conf = json.dumps(SEND_EACH_ROW) if a.spark_config == "each" else a.spark_config
        trees = {"as it is": (None, []), "after": (None, ["--spark-config", conf])}
        print(f"after: up --spark-config '{conf}'")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for i in range(a.rounds if len(trees) > 1 else 1):
        for name in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
            print(f"{name}, round {i + 1}: busiest threads", flush=True)
            runs[name].append(measure(*trees[name], a.settle_s, a.window_s))
            print(_line(f"{name}, round {i + 1}", runs[name][-1]), flush=True)
    print(f"the demo at rest (streamiq up --fresh, nothing written or read; {a.settle_s:g} s "
          f"after ready, a {a.window_s:g} s window); target: the whole demo under 15% of a "
          "core")
    medians = {}
    for name, got in runs.items():
        keys = set().union(*got)
        medians[name] = {k: statistics.median(r.get(k, 0.0) for r in got) for k in keys}
        print(_line(f"{name} (median of {len(got)})", medians[name]))
    if len(medians) > 1:
        first = next(iter(trees))
        b, n = medians[first], medians["after"]
        print(f"  after / {first}: " + ", ".join(
            f"{k} {n.get(k, 0.0) / b[k]:.2f}x" for k in ("total", "pipeline", "broker")
            if b.get(k)))


if __name__ == "__main__":
    main()
