"""How this node's answers were served, counted instead of logged per request.

A log line per lookup ("answered locally" / "forwarded to owner") cost the default log
level a measurable share of lookup throughput, so the hot path only bumps integers
here. Who answered stays visible three ways: every answer carries ``served_by`` and
``hops``; ``/health`` reports these totals; and :func:`log_summaries` writes one INFO
line per period in which the node answered anything, e.g.::

    last 60s: 1520 answers: 1013 local, 507 forwarded (127.0.0.1:9002 251, ...), ...
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from streamiq.metrics import Latency

__all__ = ["SERVED", "Traffic", "log_summaries"]

#: how a client's query was served (``serving/http/metrics.py``; "peer" is another node's)
SERVED = ("local", "forwarded", "fanout")

log = logging.getLogger("streamiq.traffic")


@dataclass(slots=True)
class Traffic:
    """Answers given by this node since it started, by how they were served."""

    local: int = 0  # a client's request answered from this node's store
    forwarded: dict[str, int] = field(default_factory=dict)  # owner -> answers relayed
    fanout: int = 0  # scatter-gather requests (multi-get, scan, aggregate) coordinated here
    for_peers: int = 0  # forwarded requests from other nodes answered here
    unavailable: int = 0  # no replica could answer (503)
    latency: Latency | None = None  # per query type and how served; None: metrics off
    cut_moved: int = 0  # a consistent read asked again at a lower or newer cut (cuts.py)

    def forwarded_to(self, owner: str) -> None:
        self.forwarded[owner] = self.forwarded.get(owner, 0) + 1

    def refused(self, status: int) -> None:
        """A refusal answered to a client (a walk's refusal the route tries again is
        not one): counted when no replica could answer (503)."""
        if status == 503:
            self.unavailable += 1

    def totals(self) -> dict[str, object]:
        return {"local": self.local, "forwarded": sum(self.forwarded.values()),
                "forwarded_to": dict(self.forwarded), "fanout": self.fanout,
                "for_peers": self.for_peers, "unavailable": self.unavailable}

    def latencies(self, quantiles: tuple[float, ...] = (0.5, 0.99)
                  ) -> dict[str, dict[str, float | int | None]]:
        """Per way of serving (local, forwarded, fanout; every query type merged):
        ``{"count": n, "p50": seconds, "p99": seconds}`` as of now, the quantiles
        estimated from the latency histogram like Prometheus' ``histogram_quantile``
        (None before any query). Empty when metrics are off. For dashboards."""
        lat = self.latency
        if lat is None:
            return {}
        out: dict[str, dict[str, float | int | None]] = {}
        for served in SERVED:
            keys = [k for k in list(lat.counts) if k[1] == served]
            row: dict[str, float | int | None] = {"count": sum(lat.count(k) for k in keys)}
            for q in quantiles:
                row[f"p{q * 100:g}"] = lat.quantile(q, keys)
            out[served] = row
        return out

    def copy(self) -> Traffic:
        return Traffic(self.local, dict(self.forwarded), self.fanout, self.for_peers,
                       self.unavailable)

    def summary_since(self, before: Traffic, period_s: float) -> str | None:
        """One line describing what changed since ``before``; None when nothing did."""
        fwd = {o: n - before.forwarded.get(o, 0) for o, n in self.forwarded.items()}
        fwd = {o: n for o, n in sorted(fwd.items()) if n}
        local, fanout = self.local - before.local, self.fanout - before.fanout
        peers, unavail = self.for_peers - before.for_peers, self.unavailable - before.unavailable
        total = local + sum(fwd.values()) + fanout + unavail
        if not total and not peers:
            return None
        owners = ", ".join(f"{o} {n}" for o, n in fwd.items())
        return (f"last {period_s:.0f}s: {total} answers: {local} local, "
                f"{sum(fwd.values())} forwarded" + (f" ({owners})" if owners else "")
                + f", {fanout} fan-out, {unavail} unavailable; {peers} answered for peers")


async def log_summaries(traffic: Traffic, period_s: float) -> None:
    """Log :meth:`Traffic.summary_since` every ``period_s`` seconds (until cancelled)."""
    before = traffic.copy()
    while True:
        await asyncio.sleep(period_s)
        now = traffic.copy()
        line = now.summary_since(before, period_s)
        if line is not None:
            log.info("%s", line)
        before = now
