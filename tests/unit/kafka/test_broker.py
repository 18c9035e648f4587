"""The embedded broker's configuration and its one-line errors, without starting a JVM."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from procs import free_ports

from streamiq.kafka.broker import BrokerError, EmbeddedBroker, new_cluster_id


def test_missing_jars_name_the_install_command(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_KAFKA_LIBS", str(tmp_path / "none"))
    broker = EmbeddedBroker("127.0.0.1", 1, tmp_path / "log")
    with pytest.raises(BrokerError, match=r"run 'streamiq install'"):
        broker.start()
    assert broker.proc is None and not (tmp_path / "log").exists()


def test_one_broker_is_its_own_quorum_on_a_port_kept_on_disk(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    props = EmbeddedBroker("127.0.0.1", 9092, tmp_path).properties()
    voter = props["controller.quorum.voters"]
    assert voter.startswith("1@127.0.0.1:")
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == str(tmp_path.resolve() / "log")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    # a restart keeps the controller's port (the quorum's address)
    assert EmbeddedBroker("127.0.0.1", 9092, tmp_path).properties()[
        "controller.quorum.voters"] == voter


def test_the_controller_takes_the_next_port_when_free_else_another(tmp_path: Path) -> None:
    """9093 beside 9092, as Kafka's quickstart: outside the kernel's ephemeral range, so no
    client's outgoing connection takes it between the pick and the broker's bind."""
    port = free_ports(2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = EmbeddedBroker("127.0.0.1", port, tmp_path / "a").voters()[1]
    assert first == ("127.0.0.1", port + 1)
    with socket.socket() as held:
        held.bind(("127.0.0.1", port + 1))
        held.listen()
        other = EmbeddedBroker("127.0.0.1", port, tmp_path / "b").voters()[1][1]
    assert other != port + 1


def test_three_brokers_replicate_three_times_and_need_two_in_sync(tmp_path: Path) -> None:
    voters = {i: ("127.0.0.1", 20000 + i) for i in (1, 2, 3)}
    props = EmbeddedBroker("127.0.0.1", 19092, tmp_path, node_id=2, voters=voters).properties()
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:20001,2@127.0.0.1:20002,3@127.0.0.1:20003")
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:19092,"
                                  "CONTROLLER://127.0.0.1:20002")
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"


def test_cluster_ids_are_kraft_uuids() -> None:
    cid = new_cluster_id()
    assert len(cid) == 22 and cid != new_cluster_id()


def test_no_cluster_id_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """One id in 64 began with '-', which Kafka's storage tool took for an option: the
    broker's first start failed ('--cluster-id: expected one argument')."""
    import uuid

    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64url: '-A...'
    fresh = iter([dashed, uuid.UUID(int=1)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(fresh))
    assert new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_a_given_cluster_id_starting_with_a_dash_formats(tmp_path: Path) -> None:
    """A user's id of that shape still formats the log (it is passed as --cluster-id=ID).
    Runs Kafka's storage tool (a JVM), not the broker."""
    broker = EmbeddedBroker("127.0.0.1", 1, tmp_path, cluster_id="-" + "A" * 21)
    broker._prepare()
    meta = (tmp_path / "log" / "meta.properties").read_text()
    assert "cluster.id=-" + "A" * 21 in meta


def test_without_java_each_install_says_so_and_names_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Maven is needed (Ivy inside PySpark resolves), but Java is."""
    from streamiq.kafka import jars
    from streamiq.pipeline import connector

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("shutil.which", lambda _: None)
    with pytest.raises(jars.JarsError, match=r"Java was not found"):
        jars.install_jars(tmp_path / "kafka")
    with pytest.raises(jars.JarsError, match=r"Java was not found"):
        connector.install_connector(tmp_path / "connector")
    assert not any(tmp_path.iterdir())  # nothing half-made


def test_the_brokers_jars_come_from_ivy_with_kafkas_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes import fake_ivy

    from streamiq.kafka import jars

    fake_ivy(tmp_path, monkeypatch, [f"kafka_2.13-{jars.KAFKA_VERSION}.jar", "x-1.jar"])
    libs = jars.install_jars(tmp_path / "kafka")
    assert sorted(p.name for p in libs.glob("*.jar")) == [
        f"kafka_2.13-{jars.KAFKA_VERSION}.jar", "x-1.jar"]
    assert f'name="kafka_2.13" rev="{jars.KAFKA_VERSION}"' in (tmp_path / "ivy.xml").read_text()
    # the machine's shared Ivy cache locked per artifact: two installs at once (two
    # clones' make test, an empty cache) failed one of two without it
    assert '<caches lockStrategy="artifact-lock-nio"/>' in (
        tmp_path / "ivysettings.xml").read_text()
    assert jars.classpath(libs) == str(libs / "*")


def _jars(tmp_path: Path) -> Path:
    libs = tmp_path / "kafka-9.9.9"
    libs.mkdir()
    (libs / "kafka_2.13-9.9.9.jar").write_bytes(b"")
    (libs / ".complete").write_text("test\n")
    return libs


def test_the_class_data_archive_is_used_only_when_newer_than_the_jars(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from streamiq.kafka.cds import archive, archive_flags

    libs = _jars(tmp_path)
    monkeypatch.setenv("STREAMIQ_KAFKA_LIBS", str(libs))
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    jsa = archive(libs)
    assert jsa == tmp_path / "kafka-9.9.9.jsa"
    assert archive_flags() == []  # none made: the broker starts as before
    jsa.write_bytes(b"")
    flags = archive_flags()
    assert f"-XX:SharedArchiveFile={jsa}" in flags and "-Xshare:auto" in flags
    command = EmbeddedBroker("127.0.0.1", 1, tmp_path / "log").command()
    assert f"-XX:SharedArchiveFile={jsa}" in command
    os.utime(jsa, (1, 1))  # older than the jars' install: made from other jars
    assert archive_flags() == []
    assert not any("SharedArchiveFile" in a for a in
                   EmbeddedBroker("127.0.0.1", 1, tmp_path / "log").command())


def test_kafka_opts_reach_the_jvm_and_an_archiving_run_writes_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_KAFKA_LIBS", str(_jars(tmp_path)))
    monkeypatch.setenv("KAFKA_OPTS", "-XX:TieredStopAtLevel=1 -Dx=y")
    command = EmbeddedBroker("127.0.0.1", 1, tmp_path / "log").command()
    main = command.index("kafka.Kafka")
    assert command.index("-XX:TieredStopAtLevel=1") < command.index("-Dx=y") < main
    part = tmp_path / "a.part"
    archiving = EmbeddedBroker("127.0.0.1", 1, tmp_path / "log", archiving_to=part)
    assert f"-XX:ArchiveClassesAtExit={part}" in archiving.command()
    # Kafka's tools (the log's format) do not overwrite the broker's archive
    assert not any("ArchiveClassesAtExit" in a
                   for a in archiving.command("kafka.tools.StorageTool", "format"))
