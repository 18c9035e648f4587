"""Spark's Kafka connector jars (pipeline/connector.py): resolved once, checked at start."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fakes import fake_ivy

from streamiq.kafka.jars import JarsError
from streamiq.pipeline import connector
from streamiq.pipeline.connector import (
    CONNECTOR,
    CONNECTOR_VERSION,
    SPARK_VERSION,
    connector_jars,
    install_connector,
    require_connector,
    spark_version,
)

# what Ivy's retrieve puts in the folder: the connector, what it needs beyond PySpark,
# and jars PySpark already ships (at other versions)
_RESOLVED = (f"{CONNECTOR}-{{v}}.jar", "spark-token-provider-kafka-0-10_2.13-{v}.jar",
             "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar",
             "scala-library-2.13.1.jar", "hadoop-client-runtime-3.0.0.jar", "lz4-java-1.0.0.jar")


def _resolved() -> list[str]:
    return [n.format(v=CONNECTOR_VERSION) for n in _RESOLVED]


def test_install_keeps_only_jars_pyspark_lacks(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_ivy(tmp_path, monkeypatch, _resolved())
    libs = install_connector(tmp_path / "libs")
    names = sorted(Path(j).name for j in connector_jars(libs))
    v = CONNECTOR_VERSION
    assert names == ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar",
                     f"{CONNECTOR}-{v}.jar", f"spark-token-provider-kafka-0-10_2.13-{v}.jar"]
    assert "ivy-" in log.read_text()  # PySpark's own Ivy, not Maven
    module = (tmp_path / "ivy.xml").read_text()
    assert f'name="{CONNECTOR}" rev="{CONNECTOR_VERSION}"' in module  # the one pairing
    assert require_connector(libs) == connector_jars(libs)


def test_install_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_ivy(tmp_path, monkeypatch, _resolved())
    install_connector(tmp_path / "libs")
    log.unlink()
    install_connector(tmp_path / "libs")
    assert not log.exists()  # Ivy is asked once


def test_failed_resolution_names_the_artifact_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ivy(tmp_path, monkeypatch, [], fail="unresolved dependency")
    with pytest.raises(JarsError,
                       match=rf"(?s){CONNECTOR}:{CONNECTOR_VERSION}.*unresolved dependency"):
        install_connector(tmp_path / "libs")
    assert not (tmp_path / "libs").exists()
    # the fake's own files only: no half-made folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ivy.xml", "ivysettings.xml", "java.args", "jdk"]


def test_the_versions_are_named_once_and_pyproject_pins_pyspark_to_them() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[3]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pyspark=={SPARK_VERSION}" in [d.split(";")[0].strip() for d in deps]
    assert spark_version() == SPARK_VERSION  # what is installed is what is pinned
    docs = (root / "docs" / "pipeline.md").read_text()  # "Reading Kafka in Spark"
    assert f"PySpark {SPARK_VERSION}" in docs and f"{CONNECTOR} {CONNECTOR_VERSION}" in docs


def test_missing_connector_names_the_jar_and_the_command(tmp_path: Path) -> None:
    assert connector_jars(tmp_path / "none") == []
    with pytest.raises(JarsError) as err:
        require_connector(tmp_path / "none")
    msg = str(err.value)
    assert f"{CONNECTOR}-{CONNECTOR_VERSION}.jar is missing" in msg
    assert "streamiq install" in msg


def test_libs_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMIQ_SPARK_KAFKA_LIBS", str(tmp_path))
    assert connector.connector_libs() == tmp_path
    monkeypatch.delenv("STREAMIQ_SPARK_KAFKA_LIBS")
    assert connector.connector_libs().name == (
        f"spark-kafka-{CONNECTOR_VERSION}-spark-{spark_version()}")


def test_pipeline_refuses_to_start_without_the_connector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One line naming the jar and the command, before Spark starts."""
    from streamiq.config import Settings
    from streamiq.pipeline import runner, session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setenv("STREAMIQ_SPARK_KAFKA_LIBS", str(tmp_path / "none"))
    monkeypatch.setattr(session, "spark_session", no_spark)
    monkeypatch.setattr(runner, "configure_logging", lambda *a: None)
    monkeypatch.setattr(runner, "stop_on_signals", threading.Event)
    with pytest.raises(SystemExit) as err:
        runner.run_pipeline(Settings(app="bank"))
    msg = str(err.value.code)
    assert msg.startswith("streamiq pipeline: Spark's Kafka connector is not installed")
    assert f"{CONNECTOR}-{CONNECTOR_VERSION}.jar is missing" in msg
    assert "streamiq install" in msg
