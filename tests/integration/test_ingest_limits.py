"""The HTTP edge through real processes on Apache Kafka: the ingest refuses a 300 MB
body without a token, and a 100 MB header, before reading them (its memory stays flat,
the client sees the answer while it is still sending); with a token an oversized body is
413 and nothing is produced; a node and the ingest close a connection that stalls
halfway through a request, and keep a well-behaved keep-alive client."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from procs import HTTP

from streamiq.serving.http.http_limits import MAX_BODY_BYTES, MAX_HEAD_BYTES

pytestmark = pytest.mark.integration

MB = 1024 * 1024
TIMEOUT_S = 1.0  # the parts' --request-read-timeout-s here
ORDER = b'{"order_id": "o-1", "store": "s-1", "type": "GENERAL", "amount": 12.5}'


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (the peak so far) of a process, in kB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    return {k: int(v.split()[0]) for k, v in fields.items()}


def send_until_answered(port: int, head: bytes, stream: bytes, total: int
                        ) -> tuple[int, dict[str, Any], int]:
    """Send ``head``, then ``stream`` over and over up to ``total`` bytes, until the
    server answers. Returns the status, the JSON body and how much of ``total`` was sent
    when the answer came; asserts the server then closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head)
        s.setblocking(False)
        sent, got, deadline = 0, b"", time.monotonic() + 120
        while b"\r\n\r\n" not in got:
            assert time.monotonic() < deadline, f"no answer; {sent} bytes sent"
            readable, writable, _ = select.select([s], [s] if sent < total else [], [], 1)
            if readable:
                chunk = s.recv(65536)
                assert chunk, f"closed without an answer after {sent} bytes"
                got += chunk
            elif writable:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    sent += s.send(stream[:total - sent])
        s.settimeout(60)
        head_part, _, body = got.partition(b"\r\n\r\n")
        status = int(head_part.split()[1])
        length = int(next(line.split(b":")[1] for line in head_part.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(body) < length:
            body += s.recv(65536)
        assert closed(s), "the server kept the connection open"
        return status, json.loads(body), sent


def closed(s: socket.socket) -> bool:
    """Read and drop until the server's FIN or reset (within the socket's timeout)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionError:
        pass
    except TimeoutError:
        return False
    return True


def post_head(length: int, *headers: bytes) -> bytes:
    return b"".join([b"POST /orders HTTP/1.1\r\nhost: i\r\ncontent-type: application/json\r\n",
                     b"content-length: %d\r\n" % length, *headers, b"\r\n"])


def produced(bootstrap: str, topic: str) -> int:
    """Records on ``topic`` (the sum of its partitions' high watermarks)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-ingest-limits"})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in parts)
    finally:
        c.close()


def test_ingest_refuses_what_it_must_not_read_before_reading_it(cluster: Any) -> None:
    cluster.auth = True
    port, proc = cluster.ingest("orders", extra=["--request-read-timeout-s", "30"])
    token = f"authorization: Bearer {cluster.token}".encode() + b"\r\n"
    topic = cluster.topic("orders")
    before = memory_kb(proc.pid)
    body = b"x" * MB

    # 300 MB without a token: 401 while the client is still sending, the body unread
    status, problem, sent = send_until_answered(port, post_head(300 * MB), body, 300 * MB)
    assert (status, problem["code"]) == (401, "UNAUTHENTICATED"), problem
    assert sent < 300 * MB, "the answer waited for the whole body"
    # a 100 MB header: 431 before its end
    status, problem, sent = send_until_answered(
        port, post_head(len(ORDER), token).removesuffix(b"\r\n") + b"x-junk: ", body, 100 * MB)
    assert (status, problem["code"], problem["limit"]) == (431, "HEADER_TOO_LARGE",
                                                          MAX_HEAD_BYTES), problem
    assert sent < 100 * MB
    # with a valid token, 300 MB announced is 413 before any of it is read
    status, problem, sent = send_until_answered(port, post_head(300 * MB, token), body,
                                                300 * MB)
    assert (status, problem["code"], problem["limit"]) == (413, "BODY_TOO_LARGE",
                                                          MAX_BODY_BYTES), problem
    assert sent < 300 * MB
    after = memory_kb(proc.pid)
    grown_mb = (after["VmHWM"] - before["VmHWM"]) / 1024
    assert grown_mb < 64, f"ingest's peak RSS grew {grown_mb:.0f} MB: {before} -> {after}"

    # nothing of it was produced; a good write still is, exactly once
    assert produced(cluster.bootstrap, topic) == 0
    r = HTTP.post(f"http://127.0.0.1:{port}/orders", content=ORDER, timeout=30,
                  headers={**cluster.headers, "content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert produced(cluster.bootstrap, topic) == 1
    metrics = HTTP.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    for reason in ("unauthenticated", "header_too_large", "body_too_large"):
        assert f'streamiq_ingest_refused_unread_total{{reason="{reason}"}} 1.0' in metrics


def stalled_then_closed(port: int) -> tuple[int, dict[str, Any]]:
    """Send half a request and nothing more; the server's answer (it must then close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-half: ")
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, "closed without an answer"
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert closed(s), "the stalled connection was kept open"
        return int(head.split()[1]), json.loads(body)


def keep_alive_for(port: int, seconds: float) -> list[int]:
    """GET /health on one connection for ``seconds``: the statuses answered."""
    answered: list[int] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        reader = s.makefile("rb")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            line = reader.readline()
            assert line, f"the keep-alive connection was closed after {len(answered)} requests"
            status = int(line.split()[1])
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            answered.append(status)
            time.sleep(0.1)  # a client's pace, not a wait for the server
    return answered


def test_a_stalled_request_is_closed_on_a_node_and_on_the_ingest(cluster: Any) -> None:
    flags = ["--request-read-timeout-s", str(TIMEOUT_S)]
    node, _ = cluster.node("bank", extra=flags)
    ingest, _ = cluster.ingest("bank", extra=flags)
    for port in (node, ingest):
        status, problem = stalled_then_closed(port)
        assert (status, problem["code"]) == (408, "REQUEST_TIMEOUT"), problem
        answered = keep_alive_for(port, 3 * TIMEOUT_S)  # well past the timeout, one connection
        assert len(answered) >= 5 and set(answered) == {200}
