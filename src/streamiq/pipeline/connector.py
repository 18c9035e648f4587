"""Spark's own Kafka connector (``format("kafka")``): the version pairing, resolved once.

The one place that names the versions: :data:`SPARK_VERSION` (PySpark, pinned to it in
``pyproject.toml``; a unit test holds them equal) and :data:`CONNECTOR_VERSION`, the
``spark-sql-kafka-0-10_2.13`` release it runs with. Maven Central serves the connector
up to 4.2.0, not 4.3.0 yet; the 4.2.0 connector loads and runs on Spark 4.3.0 in both
trigger modes (all 432 of its class references resolve; the integration tests run it in
real-time and micro-batch mode). When the 4.3 connector is served, both become 4.3.x.

``streamiq install`` (``python -m streamiq.pipeline.connector --install`` does this part
alone) resolves the connector with its runtime dependencies through Ivy
(:func:`streamiq.kafka.jars.ivy_copy`, no Maven needed) into a folder of this Python
environment (``<prefix>/share/streamiq/spark-kafka-<connector>-spark-<spark>``, or
``STREAMIQ_SPARK_KAFKA_LIBS``). Jars PySpark already ships (Scala, Hadoop, lz4, snappy,
slf4j: any version) are left out, so the JVM sees one copy of each; what remains (the
connector, its token provider, kafka-clients, commons-pool2) is passed as ``spark.jars``.
Starting Spark only reads that folder: nothing is fetched at run time.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from streamiq.kafka.jars import JarsError, installed, ivy_copy

__all__ = ["CONNECTOR", "CONNECTOR_VERSION", "SPARK_VERSION", "connector_jars",
           "connector_libs", "install_connector", "require_connector", "spark_version"]

#: PySpark's version (pyproject.toml pins ``pyspark==`` this)
SPARK_VERSION = "4.3.0"
#: Spark's Kafka connector's version: the newest Maven Central serves (4.3.0 is not yet)
CONNECTOR_VERSION = "4.2.0"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
_INSTALL = "'streamiq install' (make install runs it)"
_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.+-]*\.jar$")


def spark_version() -> str:
    """The installed PySpark's version."""
    import pyspark

    return str(pyspark.__version__)


def connector_libs() -> Path:
    """Where the connector's jars are (or go): ``STREAMIQ_SPARK_KAFKA_LIBS`` or the
    environment's share folder, per connector and PySpark version."""
    given = os.environ.get("STREAMIQ_SPARK_KAFKA_LIBS")
    if given:
        return Path(given)
    return (Path(sys.prefix) / "share" / "streamiq"
            / f"spark-kafka-{CONNECTOR_VERSION}-spark-{spark_version()}")


def _artifact(jar: str) -> str:
    m = _VERSIONED.match(jar)
    return m.group("name") if m else jar


def _pyspark_artifacts() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact(p.name) for p in jars.glob("*.jar")}


def install_connector(libs: Path | None = None, quiet: bool = True) -> Path:
    """Resolve the connector into ``libs`` (idempotent); the folder."""
    shipped = _pyspark_artifacts()
    return ivy_copy([("org.apache.spark", CONNECTOR, CONNECTOR_VERSION)],
                    libs or connector_libs(), quiet=quiet, install=_INSTALL,
                    what=f"org.apache.spark:{CONNECTOR}:{CONNECTOR_VERSION}",
                    expect=f"{CONNECTOR}-{CONNECTOR_VERSION}.jar",
                    drop=lambda jar: _artifact(jar.name) in shipped)


def connector_jars(libs: Path | None = None) -> list[str]:
    """The jars to pass as ``spark.jars`` (empty when not installed)."""
    libs = libs or connector_libs()
    if not installed(libs):
        return []
    return sorted(str(p) for p in libs.glob("*.jar"))


def require_connector(libs: Path | None = None) -> list[str]:
    """:func:`connector_jars`, or JarsError naming the missing jar and the install command."""
    libs = libs or connector_libs()
    jars = connector_jars(libs)
    want = f"{CONNECTOR}-{CONNECTOR_VERSION}.jar"
    if not any(Path(j).name == want for j in jars):
        raise JarsError(f"Spark's Kafka connector is not installed: {libs / want} is missing; "
                        f"run {_INSTALL}")
    return jars


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args != ["--install"]:
        raise SystemExit("usage: python -m streamiq.pipeline.connector --install")
    try:
        print(f"streamiq: Spark's Kafka connector is in {install_connector()}", flush=True)
    except JarsError as exc:
        raise SystemExit(f"streamiq: {exc}") from None


if __name__ == "__main__":
    main()
