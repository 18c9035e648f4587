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
from collections.abc import Callable
from pathlib import Path

__all__ = ["KAFKA_VERSION", "JarsError", "install_jars", "installed", "kafka_libs",
           "maven_copy"]

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
    """``libs`` (default: the broker's) holds a finished install (its marker)."""
    return ((libs or kafka_libs()) / _MARK).is_file()


def maven_copy(pom: Path, libs: Path, *, what: str, install: str, expect: str,
               props: dict[str, str] | None = None,
               drop: Callable[[Path], bool] | None = None, quiet: bool = True) -> Path:
    """Maven's ``dependency:copy-dependencies`` of ``pom`` (runtime scope) into ``libs``,
    atomically and once: a temporary sibling folder, renamed into place with a marker
    written last, so an interrupted install is redone. ``expect`` is a glob that must
    match a copied jar; jars ``drop`` selects are left out. JarsError naming ``what`` (and
    ``install``, the command to run once Maven is there)."""
    if installed(libs):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError(f"{what} is resolved by Maven, which was not found: install it "
                        f"(apt-get install maven) and run {install}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{libs.name}-", dir=libs.parent))
    argv = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(pom),
            *(f"-D{k}={v}" for k, v in (props or {}).items()),
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-DoutputDirectory={work}"]
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0 or not any(work.glob(expect)):
        shutil.rmtree(work, ignore_errors=True)
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise JarsError(f"Maven could not resolve {what}:\n{tail}")
    for jar in work.glob("*.jar"):
        if drop is not None and drop(jar):
            jar.unlink()
    (work / _MARK).write_text(what + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    work.rename(libs)
    return libs


def install_jars(libs: Path | None = None, quiet: bool = True) -> Path:
    """Resolve the jars with Maven into ``libs`` (idempotent); the folder."""
    return maven_copy(_POM, libs or kafka_libs(), what=f"Apache Kafka {KAFKA_VERSION}",
                      install="'streamiq broker --install'", expect="kafka_2.13-*.jar",
                      quiet=quiet)


def classpath(libs: Path | None = None) -> str:
    """The broker's ``-cp`` argument; JarsError naming the install command if missing."""
    libs = libs or kafka_libs()
    if not installed(libs):
        raise JarsError(f"Apache Kafka's jars are not installed in {libs}: run "
                        "'streamiq broker --install' (Maven resolves them once), or pass "
                        "--bootstrap-servers for an existing Kafka")
    return str(libs / "*")
