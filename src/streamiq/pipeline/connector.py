"""Spark's own Kafka connector (``format("kafka")``): resolved by Maven, once, at install.

``python -m streamiq.pipeline.connector --install`` (run by ``make install``) asks Maven
to copy ``org.apache.spark:spark-sql-kafka-0-10_2.13`` at exactly the installed PySpark's
version, with its runtime dependencies (``connector-pom.xml``), into a folder of this
Python environment (``<prefix>/share/streamiq/spark-kafka-<version>``, or
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

from streamiq.kafka.jars import JarsError, installed, maven_copy

__all__ = ["CONNECTOR", "connector_jars", "connector_libs", "install_connector",
           "require_connector", "spark_version"]

CONNECTOR = "spark-sql-kafka-0-10_2.13"
_POM = Path(__file__).with_name("connector-pom.xml")
_INSTALL = "python -m streamiq.pipeline.connector --install (make install runs it)"
_VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.+-]*\.jar$")


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def connector_libs() -> Path:
    """Where the connector's jars are (or go): ``STREAMIQ_SPARK_KAFKA_LIBS`` or the
    environment's share folder, per PySpark version."""
    given = os.environ.get("STREAMIQ_SPARK_KAFKA_LIBS")
    if given:
        return Path(given)
    return Path(sys.prefix) / "share" / "streamiq" / f"spark-kafka-{spark_version()}"


def _artifact(jar: str) -> str:
    m = _VERSIONED.match(jar)
    return m.group("name") if m else jar


def _pyspark_artifacts() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact(p.name) for p in jars.glob("*.jar")}


def install_connector(libs: Path | None = None, quiet: bool = True) -> Path:
    """Resolve the connector with Maven into ``libs`` (idempotent); the folder."""
    version, shipped = spark_version(), _pyspark_artifacts()
    return maven_copy(_POM, libs or connector_libs(), quiet=quiet, install=_INSTALL,
                      what=f"org.apache.spark:{CONNECTOR}:{version} (PySpark's version)",
                      expect=f"{CONNECTOR}-{version}.jar", props={"spark.version": version},
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
    want = f"{CONNECTOR}-{spark_version()}.jar"
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
