"""pgjdbc, the PostgreSQL JDBC driver DBeaver and Metabase connect with, for the SQL
client tests: resolved once by the Ivy inside PySpark, as streamiq's own jars are
(``kafka/jars.py``, into the environment's share/streamiq), and tests/jdbc/JdbcClient.java
compiled by the JDK's javac beside it (again only when the source changed)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from streamiq.kafka.jars import ivy_copy

__all__ = ["jdbc_client"]

HERE = Path(__file__).parent / "jdbc"
PGJDBC = ("org.postgresql", "postgresql", "42.7.7")
LIBS = Path(sys.prefix) / "share" / "streamiq" / f"pgjdbc-{PGJDBC[2]}"


def _classpath() -> str:
    """The driver's jars, and the compiled client (made when missing or stale)."""
    libs = ivy_copy([PGJDBC], LIBS, what="the PostgreSQL JDBC driver",
                    install="the SQL client tests", expect="postgresql-*.jar")
    jars = sorted(str(j) for j in libs.glob("*.jar"))
    source = HERE / "JdbcClient.java"
    classes = LIBS.parent / ("pgjdbc-client-" + hashlib.sha256(
        source.read_bytes()).hexdigest()[:12])
    if not (classes / "JdbcClient.class").is_file():
        javac = shutil.which("javac")
        assert javac is not None, "javac is needed: apt-get install default-jdk-headless"
        work = classes.with_name(classes.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run([javac, "-cp", ":".join(jars), "-d", str(work), str(source)],
                       check=True, capture_output=True, timeout=300)
        shutil.rmtree(classes, ignore_errors=True)
        work.rename(classes)
    return ":".join([str(classes), *jars])


def jdbc_client(sql_port: int, password: str) -> dict[str, str]:
    """Run JdbcClient against a node's SQL port: each check's output by its name."""
    java = shutil.which("java")
    assert java is not None, "java is needed: apt-get install default-jdk-headless"
    done = subprocess.run([java, "-cp", _classpath(), "JdbcClient", str(sql_port), password],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split("\t", 1) for line in done.stdout.splitlines() if "\t" in line)
