"""``streamiq up`` run as a user runs it, for the integration tests: in its own process
group on free ports, its output in a file, every process of its tree tracked by PID; and
the checks those tests share (balances through a node, waits with a bound)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from procs import HTTP, free_port, free_ports

from streamiq.auth import mint

JWT_SECRET = uuid.uuid4().hex  # up's --jwt-secret (in its environment), so the tests
HEADERS = {"authorization": f"Bearer {mint(JWT_SECRET, subject='tests')}"}  # have a token
START_S = 300  # bounded waits, generous: Spark on a shared 2-core machine
CONVERGE_S = 240


def proc_info(pid: int) -> tuple[int, list[str]] | None:
    """(ppid, argv) of a live process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if stat.rpartition(")")[2].split()[0] == "Z":
        return None  # a zombie has exited
    return int(stat.rpartition(")")[2].split()[1]), [a.decode(errors="replace") for a in argv if a]


def descendants(root: int) -> dict[int, list[str]]:
    """Every live process below ``root`` (its argv), found through /proc's parent links."""
    kids: dict[int, list[int]] = defaultdict(list)
    argv: dict[int, list[str]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            info = proc_info(int(d.name))
            if info is not None:
                kids[info[0]].append(int(d.name))
                argv[int(d.name)] = info[1]
    out: dict[int, list[str]] = {}
    todo = list(kids[root])
    while todo:
        pid = todo.pop()
        if pid in argv:
            out[pid] = argv[pid]
            todo += kids[pid]
    return out


def has_flag(argv: list[str], flag: str, value: str) -> bool:
    return any(a == flag and b == value for a, b in itertools.pairwise(argv))


class Up:
    """``python -m streamiq up`` in its own process group, output in a file."""

    cwd: Path | None = None  # up's working folder (None: the tests')
    start_s: float = START_S  # how long a start may take

    def __init__(self, root: Path, nodes: int = 3, flags: tuple[str, ...] = (),
                 warmup: bool = False) -> None:
        self.root = root
        self.flags = list(flags)  # more flags of up
        self.warmup = warmup  # the pipeline's (off in tests: procs.FAST_ENV)
        self.log_path = root / "up.log"
        self.broker_port = free_ports(2)  # and the next, its controller's (kafka/broker.py)
        self.metrics_port = free_port()  # the pipeline's (never the default 9400)
        self.ingest_port = free_port()
        self.node_port = free_ports(nodes)  # nodes take --node-port and up
        self.node_ports = [self.node_port + i for i in range(nodes)]
        self.sql_port = free_ports(nodes)  # never the defaults 5433-5435
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, list[str]] = {}  # every process of the tree ever seen, by pid
        self.token = ""  # the demo token up printed

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1",
               "STREAMIQ_JWT_SECRET": JWT_SECRET}
        if self.warmup:
            env.pop("STREAMIQ_WARMUP", None)  # the product's default, as in the demo
        return env

    def ports(self) -> list[str]:
        """up's flags for this run's free ports."""
        return ["--broker-port", str(self.broker_port), "--ingest-port", str(self.ingest_port),
                "--node-port", str(self.node_port), "--nodes", str(len(self.node_ports)),
                "--metrics-port", str(self.metrics_port), "--sql-port", str(self.sql_port)]

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "streamiq", "up", *self.ports(),
                "--state-dir", str(self.root / "state"),
                "--checkpoint-dir", str(self.root / "checkpoints"),
                "--broker-dir", str(self.root / "kafka"), *self.flags]

    @property
    def token_path(self) -> Path:  # where up saves its demo token (beside --state-dir)
        return self.root / "token"

    def start(self) -> None:
        """Start up (again: on the same ports and folders) and wait for all parts ready."""
        after = len(self.log()) if self.log_path.exists() else 0  # a second start: same log
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         env=self.environment(), cwd=self.cwd,
                                         start_new_session=True)
        self.wait_for("streamiq: all parts ready", self.start_s, after)
        self.tree()
        # the demo token up printed is the one it saved, and the nodes take it
        self.token = self.wait_for(r"^  export STREAMIQ_TOKEN=(\S+)$", 1, after).group(1)
        assert self.token_path.read_text().strip() == self.token
        url = f"http://127.0.0.1:{self.node_port}/v1/cluster"
        assert HTTP.get(url, timeout=10).status_code == 401
        assert HTTP.get(url, timeout=10, headers={"authorization": f"Bearer {self.token}"}
                        ).status_code == 200

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 6000) -> str:
        return self.log()[-n:]

    def wait_for(self, pattern: str, timeout: float, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` (a regex) in the output from offset ``after``."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.log()[after:], re.MULTILINE)
            if m is not None:
                return m
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in up's output (exit code "
                                     f"{self.proc.poll()}); output:\n{self.tail()}")
            time.sleep(0.2)

    def tree(self) -> dict[int, list[str]]:
        now = descendants(self.pid)
        self.seen.update(now)
        return now

    def child(self, command: str, port: int | None = None) -> int:
        """PID of up's child running ``streamiq <command>`` (a node: on ``port``)."""
        for pid, argv in self.tree().items():
            if argv[1:4] == ["-m", "streamiq", command] and (
                    port is None or has_flag(argv, "--port", str(port))):
                return pid
        raise AssertionError(f"no child 'streamiq {command}' (port {port}) of up {self.pid}")

    def alive(self) -> list[int]:
        """Processes ever seen in the tree that still run the same command line."""
        return [pid for pid, argv in self.seen.items()
                if (info := proc_info(pid)) is not None and info[1] == argv]

    def kill_everything(self) -> None:
        """SIGKILL the process group, then anything of the tree that left it (the broker
        runs in its own session; Spark's JVM may)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.tree()
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()
        for pid in self.alive():
            os.kill(pid, signal.SIGKILL)

    def running(self) -> Iterator[Up]:
        """Started, and SIGKILLed whatever happens after (a module fixture's body:
        ``yield from Up(...).running()``)."""
        try:
            self.start()
            yield self
        finally:
            self.kill_everything()


def post_json(c: httpx.Client, url: str, **kw: Any) -> Any:
    r = c.post(url, **kw)
    assert r.status_code == 200, (url, r.status_code, r.text)
    return r.json()


def balances_of(port: int, accounts: list[str]) -> dict[str, int | None]:
    """Balances through one node's multi-get (None: not found)."""
    out: dict[str, int | None] = {}
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        for i in range(0, len(accounts), 500):
            body = post_json(c, "/v1/views/balances/keys", json={"keys": accounts[i:i + 500]})
            assert body["status"] == "OK", body
            for r in body["results"]:
                out[r["key"]] = r["value"]["balance"] if r["found"] else None
    return out


def until(check: Callable[[], Any], timeout: float, what: str) -> None:
    """Wait until ``check()`` is true; on timeout fail with its last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, AssertionError) as exc:
            last = exc
        if last is True:
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not reached in {timeout:g} s; last: {str(last)[:2000]}")


def same(got: dict[str, Any], want: dict[str, Any]) -> bool | str:
    """True, or what differs: (got, want) per key."""
    wrong = {k: (got.get(k), want.get(k)) for k in got.keys() | want.keys()
             if got.get(k) != want.get(k)}
    return True if not wrong else f"{len(wrong)} differ (got, want): {list(wrong.items())[:5]}"


def metric(port: int, name: str) -> float:
    """Sum of a node's Prometheus metric over its labels."""
    text = HTTP.get(f"http://127.0.0.1:{port}/metrics", headers=HEADERS, timeout=10).text
    return sum(float(m.group(1)) for m in
               re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def exact(port: int, expected: dict[str, int]) -> bool | str:
    return same(balances_of(port, sorted(expected)), expected)


class Writer(threading.Thread):
    """POSTs amount 1 to a new account each time (bounded), noting which were acknowledged."""

    def __init__(self, port: int, prefix: str, headers: dict[str, str] | None = None,
                 pause: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.port, self.prefix, self.headers, self.pause = port, prefix, headers, pause
        self.acked: list[str] = []
        self.unacked: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(headers=self.headers, base_url=f"http://127.0.0.1:{self.port}",
                          timeout=60) as c:
            for i in range(20_000):  # bounded
                if self.stop.is_set():
                    return
                account = f"{self.prefix}-{i}"
                try:
                    ok = c.post(f"/account/{account}", params={"amount": 1}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                (self.acked if ok else self.unacked).append(account)
                time.sleep(self.pause)
