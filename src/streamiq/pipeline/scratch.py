"""Spark's scratch space, in a folder of its own per pipeline process, swept of dead
runs' leftovers.

Spark keeps each state store's RocksDB working copy, shuffle files and the like under
``spark.local.dir`` (``/tmp`` by default), in a ``spark-<uuid>`` folder it deletes in a
JVM shutdown hook. A pipeline stopped by SIGKILL (the OOM killer, a supervisor giving up,
a test) never runs that hook: its folder stays, 40-80 MB for a 3-view app, and a crash
loop fills ``/tmp``. Measured on this project's CI machine: 182 such folders, 3.2 GB.

So the pipeline's scratch is ``<temp dir>/streamiq-spark-<uid>/<pid>`` (the temp dir:
``TMPDIR``, else ``/tmp``; local disk, as Spark wants it, where the checkpoints may be
on a shared one). A pipeline removes its own at a clean stop, and a starting pipeline
removes the folders of processes that no longer run. A user's own ``spark.local.dir``
(``--spark-config``) is left as it is.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from streamiq._pids import alive

__all__ = ["LOCAL_DIR", "scratch_dir"]

LOCAL_DIR = "spark.local.dir"
log = logging.getLogger("streamiq.pipeline")


def scratch_dir(base: Path | None = None) -> Path:
    """This process's scratch folder under ``base`` (default: ``streamiq-spark-<uid>``
    in the temp dir), made, after removing those of processes that are gone."""
    if base is None:
        base = Path(tempfile.gettempdir()) / f"streamiq-spark-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)
    for old in base.iterdir():
        if old.name.isdigit() and int(old.name) != os.getpid() and not alive(int(old.name)):
            shutil.rmtree(old, ignore_errors=True)
            log.info("removed Spark scratch of a stopped pipeline (pid %s)", old.name)
    mine = base / str(os.getpid())
    mine.mkdir(exist_ok=True)
    return mine

