"""A lookup load through live nodes, each answer checked: what a hung or slow node
costs (``tests/integration/test_hung_node.py`` asserts no query fails or is wrong and
the slow one is hedged; ``bench/bench_hung.py`` measures how long they take)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

__all__ = ["N_ACCOUNTS", "WORKERS", "hedges_sent", "rows", "run"]

N_ACCOUNTS = 300
WORKERS = 4


def rows() -> list[dict[str, Any]]:
    return [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0}
            for i in range(N_ACCOUNTS)]


async def _load(ports: list[int], stop: asyncio.Event, stats: dict[str, Any], seed: int
                ) -> None:
    """Lookups and 5-key multi-gets through the live nodes, each answer checked."""
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=20) as client:
        while not stop.is_set():
            port = rng.choice(ports)
            keys = rng.sample(range(N_ACCOUNTS), 5)  # a multi-get answers each key once
            t0 = time.monotonic()
            try:
                if rng.random() < 0.8:
                    r = await client.get(f"http://127.0.0.1:{port}/account/a{keys[0]}")
                    ok = r.status_code == 200 and r.json()["value"]["balance"] == keys[0]
                else:
                    r = await client.post(f"http://127.0.0.1:{port}/v1/views/balances/keys",
                                          json={"keys": [f"a{k}" for k in keys]})
                    got = r.json() if r.status_code == 200 else {}
                    ok = got.get("status") == "OK" and [x["value"]["balance"] for x in
                                                         got["results"]] == keys
            except httpx.HTTPError as exc:
                stats["failed"].append((port, type(exc).__name__))
                continue
            stats["slowest"] = max(stats["slowest"], time.monotonic() - t0)
            stats.setdefault("latencies", []).append(time.monotonic() - t0)
            if ok:
                stats["ok"] += 1
            elif r.status_code == 200:
                stats["wrong"].append((port, keys, r.text[:200]))
            else:
                stats["failed"].append((port, r.status_code, r.text[:200]))
            await asyncio.sleep(0.005)


async def run(ports: list[int], seconds: float, stats: dict[str, Any]) -> None:
    stop = asyncio.Event()
    workers = [asyncio.create_task(_load(ports, stop, stats, seed)) for seed in range(WORKERS)]
    await asyncio.sleep(seconds)  # the load runs through the node's pause (pacing)
    stop.set()
    await asyncio.gather(*workers)


def hedges_sent(port: int) -> int:
    doc = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
    return sum(doc["peers"]["hedges"]["sent"].values())
