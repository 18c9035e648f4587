"""Spark's Kafka connector jars (pipeline/connector.py): resolved once, checked at start."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from streamiq.kafka.jars import JarsError
from streamiq.pipeline import connector
from streamiq.pipeline.connector import (
    CONNECTOR,
    connector_jars,
    install_connector,
    require_connector,
    spark_version,
)

# what Maven's copy-dependencies puts in -DoutputDirectory: the connector, what it needs
# beyond PySpark, and jars PySpark already ships (at other versions)
_RESOLVED = (f"{CONNECTOR}-{{v}}.jar", "spark-token-provider-kafka-0-10_2.13-{v}.jar",
             "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar",
             "scala-library-2.13.1.jar", "hadoop-client-runtime-3.0.0.jar", "lz4-java-1.0.0.jar")


def _fake_mvn(bin_dir: Path, log: Path) -> None:
    """An ``mvn`` that records its arguments and writes the jars Maven would."""
    names = " ".join(n.format(v=spark_version()) for n in _RESOLVED)
    script = bin_dir / "mvn"
    script.write_text(f"""#!/bin/sh
echo "$@" > {log}
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${{a#-DoutputDirectory=}}";; esac; done
for n in {names}; do echo jar > "$out/$n"; done
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_install_keeps_only_jars_pyspark_lacks(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "mvn.args"
    bin_dir.mkdir()
    _fake_mvn(bin_dir, log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    libs = install_connector(tmp_path / "libs")
    names = sorted(Path(j).name for j in connector_jars(libs))
    v = spark_version()
    assert names == ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar",
                     f"{CONNECTOR}-{v}.jar", f"spark-token-provider-kafka-0-10_2.13-{v}.jar"]
    assert f"-Dspark.version={v}" in log.read_text()  # exactly PySpark's version
    assert require_connector(libs) == connector_jars(libs)


def test_install_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "mvn.args"
    bin_dir.mkdir()
    _fake_mvn(bin_dir, log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    install_connector(tmp_path / "libs")
    log.unlink()
    install_connector(tmp_path / "libs")
    assert not log.exists()  # Maven is asked once


def test_failed_resolution_names_the_artifact_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text("#!/bin/sh\necho 'Could not find artifact'\nexit 1\n")
    (bin_dir / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(JarsError, match=rf"(?s){CONNECTOR}:{spark_version()}.*Could not find"):
        install_connector(tmp_path / "libs")
    assert not (tmp_path / "libs").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # no half-filled folder left


def test_missing_connector_names_the_jar_and_the_command(tmp_path: Path) -> None:
    assert connector_jars(tmp_path / "none") == []
    with pytest.raises(JarsError) as err:
        require_connector(tmp_path / "none")
    msg = str(err.value)
    assert f"{CONNECTOR}-{spark_version()}.jar is missing" in msg
    assert "python -m streamiq.pipeline.connector --install" in msg


def test_libs_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMIQ_SPARK_KAFKA_LIBS", str(tmp_path))
    assert connector.connector_libs() == tmp_path
    monkeypatch.delenv("STREAMIQ_SPARK_KAFKA_LIBS")
    assert connector.connector_libs().name == f"spark-kafka-{spark_version()}"


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
    assert f"{CONNECTOR}-{spark_version()}.jar is missing" in msg
    assert "--install" in msg
