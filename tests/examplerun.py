"""Running the examples as a person would: ``.venv/bin/python examples/X.py BOOTSTRAP
NODES`` against a running ``up``, from a shell with none of our settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from updemo import HEADERS, Up

__all__ = ["EXAMPLES", "example", "example_env", "example_passes", "topics_and_views"]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(up: Up, script: Path, env: dict[str, str],
            cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run to its end against ``up``'s broker and nodes."""
    nodes = ",".join(f"127.0.0.1:{p}" for p in up.node_ports)
    return subprocess.run([sys.executable, str(script), f"127.0.0.1:{up.broker_port}", nodes],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False)


def example_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a person's shell: none of our settings, a TMPDIR of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STREAMIQ_", "PYSPARK_", "SPARK_"))}
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def example_passes(up: Up, script: Path, env: dict[str, str], cwd: Path) -> None:
    """``script`` exits 0 having checked every node, says its one fallback line, and
    removes the checkpoint it made in TMPDIR."""
    start = time.monotonic()
    done = example(up, script, env, cwd)
    print(f"\n{script.name}: exit {done.returncode} after {time.monotonic() - start:.0f} s")
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{script.name}:\n{out[-4000:]}"
    assert "every node answers" in done.stdout, out[-4000:]
    # its join is not one real-time mode runs: one line says so, then micro-batch
    fallback = [line for line in out.splitlines() if line.startswith("streamiq.sink:")]
    assert fallback == ["streamiq.sink: real-time mode does not run SortExec, "
                        "SortMergeJoinExec (not on its operator allowlist); the query "
                        "runs in micro-batch mode"], out[-4000:]
    # its checkpoint was in TMPDIR and is gone
    checkpoint = re.search(r"^job started \(checkpoint (\S+)\)", done.stdout, re.M)
    assert checkpoint is not None, done.stdout
    assert Path(checkpoint[1]).parent == Path(env["TMPDIR"]), checkpoint[1]
    assert not Path(checkpoint[1]).exists(), f"{script.name} left {checkpoint[1]}"


#: the membership topic of each epoch (routing/epochs.py): made and dropped as time
#: passes, whatever runs; every other topic stays unless something makes or deletes it
EPOCH_TOPIC = re.compile(r"^_streamiq-.+-members-\d+$")


def topics_and_views(up: Up) -> tuple[list[str], list[str]]:
    """The up's topics (but the membership epochs') and views: what a run could leave."""
    from streamiq.kafka.admin import topic_names

    views = httpx.get(f"http://127.0.0.1:{up.node_ports[0]}/v1/views", headers=HEADERS,
                      timeout=30).json()["views"]
    topics = topic_names({"bootstrap.servers": f"127.0.0.1:{up.broker_port}"})
    return (sorted(t for t in topics if not EPOCH_TOPIC.match(t)),
            sorted(v["name"] for v in views))
