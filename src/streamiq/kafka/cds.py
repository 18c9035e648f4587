"""A class-data archive of the embedded broker: Java's AppCDS, made once at install time.

A broker's JVM spends most of its start loading, parsing and verifying the classes of
Kafka's jars. Java 17's dynamic archive (``-XX:ArchiveClassesAtExit``) writes the classes
one short broker run loaded; every later broker on the same jars maps them instead.
``streamiq install`` (``make install``) makes it beside the jars, with a
throwaway broker (kafka/install.py). Measured on 2 cores (``bench/bench_kafka.py``
prints both, interleaved): a start on an empty folder 4.7 s -> 2.8 s, a restart 3.3 s ->
1.8 s and its JVM's CPU by then 5.6 s -> 3.0 s, resident memory 239 MB -> 191 MB.

The archive is only an optimisation: a broker without one, or on a Java or jars the
archive was not made from, starts as before (``-Xshare:auto`` skips it, silently).
"""

from __future__ import annotations

from pathlib import Path

from streamiq.kafka.jars import installed, kafka_libs

__all__ = ["archive", "archive_flags", "current"]

#: no CDS lines in the broker's log (an archive that does not match is skipped silently)
_QUIET = "-Xlog:cds=off,cds+dynamic=off"


def archive(libs: Path | None = None) -> Path:
    """Where the archive of the jars in ``libs`` is: beside the folder, ``<libs>.jsa``."""
    libs = libs or kafka_libs()
    return libs.parent / f"{libs.name}.jsa"


def current(libs: Path) -> bool:
    """The archive is there and newer than the jars' install (their marker)."""
    jsa = archive(libs)
    return jsa.is_file() and jsa.stat().st_mtime >= (libs / ".complete").stat().st_mtime


def archive_flags(libs: Path | None = None) -> list[str]:
    """The JVM flags that map the archive, or none when there is no current one."""
    libs = libs or kafka_libs()
    if not (installed(libs) and current(libs)):
        return []
    return [f"-XX:SharedArchiveFile={archive(libs)}", "-Xshare:auto", _QUIET]
