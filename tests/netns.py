"""Separate test hosts on one machine: network namespaces joined by veth links to a bridge.

``Hosts(3)`` creates namespaces ``siq<pid>h0..2``, each with its own address on a
private /24 (``10.213.X.11`` and up; the bridge in the root namespace is ``.1``, so
the root namespace reaches every host and hosts reach a process bound there, e.g. a
broker). ``hosts.command(i, argv)`` runs ``argv`` inside host ``i``. ``close()``
removes every namespace, link and bridge it made; names carry the creating process'
PID, so leftovers of a test run that was killed are removed by the next one, and runs
in parallel never touch each other's. Needs root and iproute2 (``ip``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess

from streamiq._pids import alive

__all__ = ["Hosts", "available"]

_PREFIX = "siq"


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed: apt-get install -y iproute2"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def remove_leftovers() -> None:
    """Namespaces and bridges of test runs whose process is gone."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        pid = name[len(_PREFIX):].split("h")[0]
        if name.startswith(_PREFIX) and pid.isdigit() and not alive(int(pid)):
            _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        pid = name[len(_PREFIX) + 1:]
        if name.startswith(_PREFIX + "b") and pid.isdigit() and not alive(int(pid)):
            _ip("link", "del", name, check=False)


class Hosts:
    def __init__(self, n: int) -> None:
        remove_leftovers()
        tag = f"{_PREFIX}{os.getpid()}"
        self.bridge = f"{_PREFIX}b{os.getpid()}"
        self.names = [f"{tag}h{i}" for i in range(n)]
        net = f"10.213.{random.randrange(1, 250)}"
        self.gateway = f"{net}.1"
        self.addresses = [f"{net}.{11 + i}" for i in range(n)]
        self._net = net
        self._made: list[tuple[str, ...]] = []  # undo commands, in reverse order
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", "del", self.bridge))
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for ns, addr in zip(self.names, self.addresses, strict=True):
            _ip("netns", "add", ns)
            self._made.append(("netns", "del", ns))
            outside, inside = f"{ns}o", f"{ns}i"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(("link", "del", outside))
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("link", "set", inside, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", self.gateway)

    def add_address(self, i: int, last_octet: int) -> str:
        """One more address on host ``i`` (as a service address in front of it)."""
        addr = f"{self._net}.{last_octet}"
        _ip("-n", self.names[i], "addr", "add", f"{addr}/24", "dev", f"{self.names[i]}i")
        return addr

    def command(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` run inside host ``i`` (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", self.names[i], *argv]

    def close(self) -> None:
        for undo in reversed(self._made):
            _ip(*undo, check=False)
        self._made.clear()

    def leftovers(self) -> list[str]:
        """Namespaces or links of these hosts that still exist (empty after close)."""
        names = set(_ip("netns", "list", check=False).stdout.split())
        links = _ip("-o", "link", "show", check=False).stdout
        return [n for n in self.names if n in names] + [
            n for n in (self.bridge, *(f"{ns}o" for ns in self.names)) if f" {n}" in links
            or f" {n}@" in links]
