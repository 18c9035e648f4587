"""Jars streamiq runs on, resolved once at install time by the Ivy inside PySpark.

Two sets: the embedded broker's (Apache Kafka, :data:`BROKER_MODULES`) and Spark's Kafka
connector (``pipeline/connector.py``). Each is resolved by Apache Ivy, the resolver
PySpark ships in its ``jars`` folder and uses itself for ``spark.jars.packages`` (Spark's
``SparkSubmitUtils``), from Maven Central, reading a local Maven repository
(``~/.m2/repository``) first when there is one: a user needs Python and Java only, no
Maven. The jars go into a folder of this Python environment
(``<prefix>/share/streamiq/<name>``, or an environment variable per set), written whole
or not at all; starting a broker or Spark only reads that folder: nothing is fetched at
run time. ``streamiq install`` (``make install``, and ``streamiq up`` when something is
missing) resolves both.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

__all__ = ["BROKER_MODULES", "KAFKA_VERSION", "JarsError", "install_jars", "installed",
           "ivy_copy", "kafka_libs"]

#: the Apache Kafka release the embedded broker runs
KAFKA_VERSION = "4.4.0"
Module = tuple[str, str, str]  # (organisation, name, revision), as in Maven coordinates
#: the embedded broker's classpath: Kafka (KRaft) with a log4j2 binding for its logs
BROKER_MODULES: tuple[Module, ...] = (
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.25.5"),
    ("org.slf4j", "slf4j-api", "2.0.17"),
)
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
_MARK = ".complete"  # written last: a folder without it is an interrupted install
_INSTALL = "'streamiq install'"


class JarsError(RuntimeError):
    """Jars are missing and could not be resolved."""


def kafka_libs() -> Path:
    """Where the broker's jars are (or go): ``STREAMIQ_KAFKA_LIBS`` or the environment's."""
    given = os.environ.get("STREAMIQ_KAFKA_LIBS")
    if given:
        return Path(given)
    return Path(sys.prefix) / "share" / "streamiq" / f"kafka-{KAFKA_VERSION}"


def installed(libs: Path | None = None) -> bool:
    """``libs`` (default: the broker's) holds a finished install (its marker)."""
    return ((libs or kafka_libs()) / _MARK).is_file()


def _ivy_jar() -> Path:
    """Apache Ivy as PySpark ships it (``pyspark/jars/ivy-*.jar``)."""
    spec = importlib.util.find_spec("pyspark")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(p for r in roots for p in (Path(r) / "jars").glob("ivy-*.jar"))
    if not found:
        raise JarsError("Apache Ivy was not found in PySpark's jars (is pyspark installed?)")
    return found[-1]


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise JarsError("Java was not found (streamiq needs Java 17): install it or set "
                        "JAVA_HOME")
    return java


def _settings() -> str:
    """Ivy's resolvers: the local Maven repository (if any) before Maven Central. The
    cache (``~/.ivy2/cache``, shared by every install on the machine) is locked per
    artifact: without it, two installs at once (two clones' ``make test``) read each
    other's half-written files and one failed with "module not found"."""
    m2 = Path.home() / ".m2" / "repository"
    local = (f'<ibiblio name="local-m2" m2compatible="true" checkmodified="false" '
             f'root={quoteattr(m2.as_uri())}/>' if m2.is_dir() else "")
    return (f'<ivysettings><settings defaultResolver="chain"/>'
            f'<caches lockStrategy="artifact-lock-nio"/><resolvers>'
            f'<chain name="chain" returnFirst="true">{local}'
            f'<ibiblio name="central" m2compatible="true" root="{MAVEN_CENTRAL}"/>'
            f'</chain></resolvers></ivysettings>\n')


def _module(modules: Sequence[Module]) -> str:
    deps = "".join(f'<dependency org={quoteattr(o)} name={quoteattr(n)} rev={quoteattr(r)} '
                   f'conf="default->default"/>' for o, n, r in modules)
    return (f'<ivy-module version="2.0"><info organisation="io.streamiq" module="jars"/>'
            f'<dependencies>{deps}</dependencies></ivy-module>\n')


def ivy_copy(modules: Sequence[Module], libs: Path, *, what: str, expect: str,
             install: str = _INSTALL, drop: Callable[[Path], bool] | None = None,
             quiet: bool = True) -> Path:
    """Resolve ``modules`` and their runtime dependencies with Ivy into ``libs``,
    atomically and once: a temporary sibling folder, renamed into place with a marker
    written last, so an interrupted install is redone. ``expect`` is a glob that must
    match a copied jar; jars ``drop`` selects are left out. JarsError naming ``what``
    (and ``install``, the command that does it again)."""
    if installed(libs):
        return libs
    java, ivy = _java(), _ivy_jar()
    libs.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{libs.name}-", dir=libs.parent))
    try:
        (work / "ivysettings.xml").write_text(_settings())
        (work / "ivy.xml").write_text(_module(modules))
        argv = [java, "-jar", str(ivy), *(["-warn"] if quiet else []),
                "-settings", str(work / "ivysettings.xml"), "-ivy", str(work / "ivy.xml"),
                "-confs", "default", "-types", "jar", "bundle",
                "-retrieve", f"{work}/[artifact]-[revision](-[classifier]).[ext]"]
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
        if done.returncode != 0 or not any(work.glob(expect)):
            tail = "\n".join(done.stdout.strip().splitlines()[-15:])
            raise JarsError(f"could not resolve {what} (Apache Ivy, from {MAVEN_CENTRAL}); "
                            f"run {install} again once it is reachable:\n{tail}")
        for f in (work / "ivysettings.xml", work / "ivy.xml"):
            f.unlink()
        for jar in work.glob("*.jar"):
            if drop is not None and drop(jar):
                jar.unlink()
        (work / _MARK).write_text(what + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        work.rename(libs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return libs


def install_jars(libs: Path | None = None, quiet: bool = True) -> Path:
    """Resolve the broker's jars into ``libs`` (idempotent); the folder."""
    return ivy_copy(BROKER_MODULES, libs or kafka_libs(), what=f"Apache Kafka {KAFKA_VERSION}",
                    expect="kafka_2.13-*.jar", quiet=quiet)


def classpath(libs: Path | None = None) -> str:
    """The broker's ``-cp`` argument; JarsError naming the install command if missing."""
    libs = libs or kafka_libs()
    if not installed(libs):
        raise JarsError(f"Apache Kafka's jars are not installed in {libs}: run "
                        f"{_INSTALL} (resolves them once), or pass --bootstrap-servers "
                        "for an existing Kafka")
    return str(libs / "*")
