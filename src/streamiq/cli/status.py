"""``streamiq status``: the cluster as one table, or as JSON with ``--json``.

The cluster map comes from the first node that answers ``GET /v1/cluster`` (every node
computes the same one); readiness from each member's own ``GET /health``. Each node
lists, per view, every partition it is assigned or holds: its role (``active``,
``standby``, or ``previous`` for a partition it still holds while new replicas
restore), changelog offset and lag, and whether it has restored (while it restores, how
far: records applied of the changelog's, rate and time left, from the node's
``/health``). Per view, write to
stored (an input record's time to its row stored on a node) at p50 and p99, from every
node's histogram since it started (``/health``'s ``freshness``), and split in its two
stages (pipeline, node) when the nodes measure them. When a ``streamiq up``
runs on this machine, its parts (ready, restarts, crash-looping, next restart) come
from the ``up.json`` it keeps beside the state directory (STREAMIQ_STATE_DIR).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import httpx
from rich.console import Group
from rich.table import Table
from rich.text import Text

from streamiq._pids import alive
from streamiq.cli.common import (
    CliError,
    add_address,
    add_token,
    auth_headers,
    cell,
    console,
    print_json,
    reason,
    saved_file,
)

__all__ = ["add_parser", "build_status", "fetch", "freshness", "render", "render_up",
           "restore_text", "run", "up_parts"]

HELP = "show the cluster: nodes, and per view the partitions each holds, role, lag, ready"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("status", help=HELP, description=HELP + ".")
    add_address(p, "--node", "STREAMIQ_NODE", "localhost:9001",
                "Any node of the cluster (comma-separate several to try in turn).", several=True)
    add_token(p)
    p.set_defaults(check=None)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS",
                   help="per-request timeout [default 3]")


def fetch(seeds: str, timeout: float = 3.0, transport: httpx.BaseTransport | None = None,
          headers: dict[str, str] | None = None
          ) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The node that answered, its ``/v1/cluster`` and each member's ``/health``
    (None for a member that did not answer)."""
    errors = []
    with httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0)),
                      transport=transport, headers=headers) as http:
        for seed in [s.strip() for s in seeds.split(",") if s.strip()]:
            try:
                r = http.get(f"http://{seed}/v1/cluster")
                r.raise_for_status()
                cluster = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                errors.append(f"{seed}: {reason(exc)}")
                continue
            if not isinstance(cluster, dict) or not isinstance(cluster.get("nodes"), list):
                errors.append(f"{seed}: its /v1/cluster is not a streamiq cluster map")
                continue
            health = {n["endpoint"]: _health(http, n["endpoint"]) for n in cluster["nodes"]}
            return seed, cluster, health
    raise CliError("no streamiq node answered (" + "; ".join(errors or ["no address"]) + ")")


def _health(http: httpx.Client, endpoint: str) -> dict[str, Any] | None:
    try:
        r = http.get(f"http://{endpoint}/health")
        doc: dict[str, Any] = r.json()
        return doc
    except (httpx.HTTPError, ValueError):
        return None


def _role(endpoint: str, assigned: list[str]) -> str:
    if assigned and assigned[0] == endpoint:
        return "active"
    return "standby" if endpoint in assigned else "previous"


def _node_partitions(endpoint: str, held: dict[str, Any], views: dict[str, Any],
                     restoring: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for view, parts in sorted(views.items()):
        mine = held.get(view, {})
        for p, pv in sorted(parts.items(), key=lambda kv: int(kv[0])):
            state = mine.get(p)
            if state is None and endpoint not in pv.get("assigned", []):
                continue
            state = state or {}
            progress = (restoring.get(view) or {}).get(str(p))
            out.append({"view": view, "partition": int(p),
                        "role": _role(endpoint, pv.get("assigned", [])),
                        "offset": state.get("offset"), "lag": state.get("lag"),
                        "restored": bool(state.get("restored", False)),
                        "restore": progress if isinstance(progress, dict) else None})
    return out


def restore_text(progress: dict[str, Any]) -> str:
    """``no: 120,000 of 333,800 records (36%), 52,000/s, 4 s left`` (``/health``'s
    ``restoring`` entry of a partition, as ``PartitionState.restore_progress`` says), or
    ``no: copying from 10.0.0.5:9001, 12.0 of 40.1 MB (29%), 38.2 MB/s, 1 s left``
    (``Transfer.progress``)."""
    if "copying_from" in progress:
        return _copy_text(progress)
    try:
        done, left, rate = int(progress["records"]), int(progress["remaining"]), \
            float(progress["rate"])
        eta = progress.get("eta_s")
    except (KeyError, TypeError, ValueError):
        return "no"
    if left < 0:
        return f"no: {done:,} records, end not yet known"
    total = done + left
    share = f" ({100 * done // total}%)" if total else ""
    text = f"no: {done:,} of {total:,} records{share}, {rate:,.0f}/s"
    return text + (f", {float(eta):,.0f} s left" if isinstance(eta, int | float) else "")


def _copy_text(progress: dict[str, Any]) -> str:
    try:
        peer, got, size = str(progress["copying_from"]), int(progress["bytes"]), \
            int(progress["size"])
        rate, eta = float(progress["rate"]), progress.get("eta_s")
    except (KeyError, TypeError, ValueError):
        return "no: copying from a peer"
    mb = 1 << 20
    if size < 0:
        return f"no: copying from {peer}, starting"
    share = f" ({100 * got // size}%)" if size else ""
    text = f"no: copying from {peer}, {got / mb:,.1f} of {size / mb:,.1f} MB{share}, " \
           f"{rate / mb:,.1f} MB/s"
    return text + (f", {float(eta):,.0f} s left" if isinstance(eta, int | float) else "")


def _problems(health: dict[str, Any]) -> list[str]:
    out = []
    if health.get("failed"):
        out.append(f"failed: {health['failed']}")
    if health.get("down"):
        out.append("restarting: " + ", ".join(health["down"]))
    if health.get("faults"):
        out.append("faults: " + ", ".join(f"{k} {v}" for k, v in health["faults"].items()))
    skipped = {k: v for k, v in (health.get("skipped_records") or {}).items() if v}
    if skipped:
        out.append("skipped records: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    return out


#: a write's stages in the order it goes through them (Materializer.stages)
_STAGES = {"pipeline": 0, "node": 1}


def freshness(health: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Write to stored per view, every node's histogram merged: p50/p99 in ms, rows;
    and per stage (``stages``: pipeline, node) when the nodes measure them."""
    views: dict[str, list[Any]] = {}
    stages: dict[str, dict[str, list[Any]]] = {}  # view -> stage -> nodes' histograms
    for h in health.values():
        for view, f in ((h or {}).get("freshness") or {}).items():
            views.setdefault(view, []).append(f)
            split = f.get("stages") if isinstance(f, dict) else None
            for stage, sf in split.items() if isinstance(split, dict) else ():
                stages.setdefault(view, {}).setdefault(stage, []).append(sf)
    out = {}
    for view, hs in sorted(views.items()):
        merged = _merged(hs)
        if merged is None:
            continue
        chain = sorted(stages.get(view, {}).items(), key=lambda kv: _STAGES.get(kv[0], 9))
        split = {stage: m for stage, shs in chain if (m := _merged(shs)) is not None}
        out[view] = {**merged, **({"stages": split} if split else {})}
    return out


def _merged(histograms: list[Any]) -> dict[str, Any] | None:
    """Nodes' histograms of one thing merged: p50/p99 in ms and rows (None: no rows).
    A histogram of other buckets, or malformed (a node of another version), is left out."""
    from streamiq.metrics import Latency

    lat: Latency | None = None
    for f in histograms:
        try:
            buckets, counts = tuple(float(b) for b in f["buckets"]), f["counts"]
            lat = lat or Latency(("x",), buckets)
            if lat.buckets != buckets or len(counts) != len(buckets) + 1:
                continue
            lat.counts[("x",)] = [a + int(b) for a, b in zip(
                lat.counts.get(("x",), [0] * len(counts)), counts, strict=True)]
            lat.sums[("x",)] = 0.0
        except (KeyError, TypeError, ValueError):
            continue
    if lat is None:
        return None
    p50, p99 = lat.quantile(0.5), lat.quantile(0.99)
    if p50 is None or p99 is None:
        return None
    return {"p50_ms": round(p50 * 1000, 1), "p99_ms": round(p99 * 1000, 1),
            "rows": lat.count(("x",))}


def build_status(via: str, cluster: dict[str, Any],
                 health: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The status document (what ``--json`` prints) from the raw answers."""
    views = cluster.get("views", {})
    nodes = []
    for n in cluster.get("nodes", []):
        ep = n["endpoint"]
        h = health.get(ep)
        nodes.append({"endpoint": ep, "reachable": h is not None,
                      "ready": bool(h and h.get("ready")), "started_at": n.get("started_at"),
                      "problems": _problems(h) if h else ["did not answer /health"],
                      "partitions": _node_partitions(ep, n.get("partitions", {}), views,
                                                     (h or {}).get("restoring") or {})})
    served = {view: [{"partition": int(p), "active": (pv.get("assigned") or [None])[0],
                      "standbys": pv.get("assigned", [])[1:],
                      "answering": [r["address"] for r in pv.get("replicas", [])]}
                     for p, pv in sorted(parts.items(), key=lambda kv: int(kv[0]))]
              for view, parts in sorted(views.items())}
    return {"via": via, "nodes": nodes, "views": served, "freshness": freshness(health)}


def _summary(doc: dict[str, Any]) -> Text:
    nodes = doc["nodes"]
    ready = sum(n["ready"] for n in nodes)
    parts = [pv for ps in doc["views"].values() for pv in ps]
    unserved = [f"{v} p{pv['partition']}" for v, ps in doc["views"].items() for pv in ps
                if not pv["answering"]]
    text = Text(f"cluster via {doc['via']}: {len(nodes)} nodes ({ready} ready), "
                f"{len(doc['views'])} views, {len(parts)} partitions")
    if unserved:
        text.append(f"; no replica can answer: {', '.join(unserved)}", style="bold red")
    return text


def render(doc: dict[str, Any]) -> Group:
    """The summary line, then one row per node, view and partition."""
    table = Table(show_edge=False, pad_edge=False)
    for name in ("node", "ready", "view", "partition", "role", "offset", "lag", "restored"):
        table.add_column(name, no_wrap=name == "node",
                         justify="right" if name in ("partition", "offset", "lag") else "left")
    for n in doc["nodes"]:
        ready = cell(n["ready"]) if n["reachable"] else Text("unreachable", style="red")
        first = [Text(n["endpoint"], style="bold"), ready]
        for i, pv in enumerate(n["partitions"] or [{}]):
            head = first if i == 0 else [Text(""), Text("")]
            role = Text(pv.get("role", "-"), style="bold" if pv.get("role") == "active" else "")
            table.add_row(*head, cell(pv.get("view")), cell(pv.get("partition")), role,
                          cell(pv.get("offset")), cell(pv.get("lag")),
                          _restored_cell(pv))
        table.add_section()
    problems = [Text(f"{n['endpoint']}: {problem}", style="yellow")
                for n in doc["nodes"] for problem in n["problems"]]
    fresh = [Text(f"write -> stored, {view}: p50 {_ms(f['p50_ms'])}, p99 {_ms(f['p99_ms'])} "
                  f"({f['rows']:,} rows stored on every node since it started)" + "".join(
                      f"; {stage} p50 {_ms(sf['p50_ms'])}, p99 {_ms(sf['p99_ms'])}"
                      for stage, sf in f.get("stages", {}).items()))
             for view, f in doc.get("freshness", {}).items()]
    return Group(_summary(doc), table, *problems, *fresh)


def _restored_cell(pv: dict[str, Any]) -> Text:
    if not pv:
        return cell(None)
    if not pv.get("restored") and pv.get("restore"):
        return Text(restore_text(pv["restore"]), style="yellow")
    return cell(pv.get("restored"))


def _ms(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def up_parts() -> dict[str, Any] | None:
    """The ``up.json`` of a ``streamiq up`` still running (its PID alive), else None."""
    try:
        doc = json.loads(saved_file("up.json").read_text())
        pid = int(doc["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not alive(pid):
        return None  # left by an up that was killed
    return doc if isinstance(doc, dict) and isinstance(doc.get("parts"), list) else None


def _part_line(p: dict[str, Any]) -> Text:
    """``node:9003 crash-looping: restart 6, next in 16 s; last exit code 1 at ...``."""
    state = "ready" if p.get("ready") else "crash-looping" if p.get("crash_looping") \
        else "not ready"
    text = f"{p.get('name')} {state}"
    if p.get("restarts"):
        text += f": {p['restarts']} restarts"
    if p.get("restart_at") is not None:
        text += f", next in {max(0.0, p['restart_at'] - time.time()):.0f} s"
    if p.get("last_exit"):
        text += f"; last exit {p['last_exit']}"
    return Text(text, style="" if p.get("ready") else "bold red" if p.get("crash_looping")
                else "yellow")


def render_up(up: dict[str, Any]) -> Group:
    parts = up["parts"]
    ready = sum(bool(p.get("ready")) for p in parts)
    head = Text(f"streamiq up (pid {up['pid']}): {ready} of {len(parts)} parts ready")
    return Group(head, *(_part_line(p) for p in parts if p.get("restarts") or
                         not p.get("ready")))


def run(args: argparse.Namespace) -> int:
    up = up_parts()
    try:
        via, cluster, health = fetch(args.node, args.timeout, headers=auth_headers(args))
    except CliError:
        if up is not None and not args.json:
            console().print(render_up(up))
        raise
    doc = build_status(via, cluster, health)
    if up is not None:
        doc["up"] = up
    if args.json:
        print_json(doc)
    else:
        console().print(render(doc), *([render_up(up)] if up is not None else []))
    return 0
