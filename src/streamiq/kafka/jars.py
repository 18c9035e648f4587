"""The embedded broker's jars: Apache Kafka resolved by Maven, once, at install time.

``streamiq broker --install`` (run by ``make install``) asks Maven to copy Apache Kafka
and its runtime dependencies, as declared in the packaged ``broker-pom.xml``, into a
folder of this Python environment (``<prefix>/share/streamiq/kafka-<version>``, or
``STREAMIQ_KAFKA_LIBS``). Starting a broker only reads that folder: nothing is fetched
at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["KAFKA_VERSION", "JarsError", "install_jars", "kafka_libs"]

#: the Apache Kafka release the embedded broker runs (kept equal to broker-pom.xml's)
KAFKA_VERSION = "4.4.0"
_POM = Path(__file__).with_name("broker-pom.xml")
_MARK = ".complete"  # written last: a folder without it is an interrupted install


class JarsError(RuntimeError):
    """The broker's jars are missing and could not be resolved."""


def kafka_libs() -> Path:
    """Where the broker's jars are (or go): ``STREAMIQ_KAFKA_LIBS`` or the environment's."""
    given = os.environ.get("STREAMIQ_KAFKA_LIBS")
    if given:
        return Path(given)
    return Path(sys.prefix) / "share" / "streamiq" / f"kafka-{KAFKA_VERSION}"


def installed(libs: Path | None = None) -> bool:
    return ((libs or kafka_libs()) / _MARK).is_file()


def install_jars(libs: Path | None = None, quiet: bool = True) -> Path:
    """Resolve the jars with Maven into ``libs`` (idempotent); the folder."""
    libs = libs or kafka_libs()
    if installed(libs):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("the embedded broker's jars are resolved by Maven, which was not "
                        "found: install it (apt-get install maven) and run "
                        "'streamiq broker --install'")
    libs.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".kafka-", dir=libs.parent))
    argv = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(_POM),
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-DoutputDirectory={work}"]
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0 or not any(work.glob("kafka_2.13-*.jar")):
        shutil.rmtree(work, ignore_errors=True)
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise JarsError(f"Maven could not resolve Apache Kafka {KAFKA_VERSION}:\n{tail}")
    (work / _MARK).write_text(KAFKA_VERSION + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    work.rename(libs)
    return libs


def classpath(libs: Path | None = None) -> str:
    """The broker's ``-cp`` argument; JarsError naming the install command if missing."""
    libs = libs or kafka_libs()
    if not installed(libs):
        raise JarsError(f"Apache Kafka's jars are not installed in {libs}: run "
                        "'streamiq broker --install' (Maven resolves them once), or pass "
                        "--bootstrap-servers for an existing Kafka")
    return str(libs / "*")
