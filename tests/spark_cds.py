"""A class-data archive of Spark's driver for the tests' JVMs (``make test`` runs this
once, before pytest; ``tests/procs.py`` points FAST_JVM at the archive when it exists).

Java 17's dynamic AppCDS: one short Spark run with ``-XX:ArchiveClassesAtExit`` writes
the classes it loaded, parsed and verified, and every later JVM on the same classpath
maps them instead of loading them again. Measured on 2 cores, a Spark driver's start
and first streaming batches: 15.8-17.4 s of JVM CPU without it, 9.3-10.4 s with it
(the archive is ~160 MB, made in ~30 s). A JVM whose classpath does not match (another
PySpark) ignores the archive silently (``-Xshare:auto``, its cds logging off).

    python tests/spark_cds.py            # make it unless it is there
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ARCHIVE = Path(sys.prefix) / "share" / "streamiq" / "spark-tests.jsa"
#: the tests' driver flags without the archive (procs.FAST_JVM adds it)
BASE_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"
#: no CDS lines in a part's log (an archive that does not match is skipped silently)
_QUIET = "-Xlog:cds=off,cds+dynamic=off"
USE_ARCHIVE = f"-XX:SharedArchiveFile={ARCHIVE} {_QUIET}"


def _workload(jvm_options: str) -> None:
    """What a pipeline's driver loads: a session as streamiq builds it, a batch job and
    a stateful streaming aggregation over a few micro-batches."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from streamiq.pipeline.session import spark_session

    conf: dict[str, Any] = {"spark.driver.extraJavaOptions": jvm_options}
    s = spark_session("local[2]", app_name="streamiq-cds", **conf)
    s.range(20000).selectExpr("id % 7 as k", "id as v").groupBy("k").sum("v").collect()
    q = (s.readStream.format("rate").option("rowsPerSecond", 100).load()
         .selectExpr("value % 5 as k", "to_json(struct(value)) as j").groupBy("k").count()
         .writeStream.outputMode("update").format("memory").queryName("cds").start())
    deadline = time.monotonic() + 120
    while (q.lastProgress is None or q.lastProgress["batchId"] < 3) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    q.stop()
    from pyspark import SparkContext

    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    s.stop()
    jvm.stdin.close()  # the JVM exits when its stdin closes, writing the archive first
    jvm.wait(120)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--workload":
        _workload(sys.argv[2])
        return 0
    if ARCHIVE.is_file():
        return 0
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    part = ARCHIVE.with_suffix(".part")
    part.unlink(missing_ok=True)
    opts = f"{BASE_JVM} -XX:ArchiveClassesAtExit={part} {_QUIET}"
    # the archive is written as the JVM exits, which it does when this child ends
    done = subprocess.run([sys.executable, __file__, "--workload", opts],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if done.returncode == 0 and part.is_file():
        part.rename(ARCHIVE)
        print(f"Spark class-data archive for the tests: {ARCHIVE}")
    else:  # the tests run without it, only slower
        part.unlink(missing_ok=True)
        print(f"no Spark class-data archive (exit {done.returncode}); tests start Spark "
              "without one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
