"""librdkafka's settings as Spark's Kafka connector (the Java client) needs them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from streamiq.config import Settings
from streamiq.pipeline.java_kafka import JavaKafkaConfigError, java_kafka_config, source_options

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def _refused(conf: dict[str, str], key: str) -> str:
    with pytest.raises(JavaKafkaConfigError) as err:
        java_kafka_config(conf)
    msg = str(err.value)
    assert f"kafka_config key '{key}'" in msg and "Spark's Kafka source" in msg, msg
    assert "\n" not in msg
    return msg


def test_plain_settings_pass_and_spark_owned_keys_are_left_out() -> None:
    got = java_kafka_config({"bootstrap.servers": "b:9092", "client.id": "x",
                             "request.timeout.ms": 5000, "group.id": "nodes",
                             "auto.offset.reset": "latest", "enable.auto.commit": "false"})
    assert got == {"bootstrap.servers": "b:9092", "client.id": "x",
                   "request.timeout.ms": "5000"}


@pytest.mark.parametrize(("mechanism", "module"), [
    ("PLAIN", PLAIN), ("SCRAM-SHA-256", SCRAM), ("scram-sha-512", SCRAM)])
def test_username_and_password_become_a_jaas_entry(mechanism: str, module: str) -> None:
    conf = Settings(kafka_config={"security.protocol": "sasl_ssl",
                                  "sasl.mechanisms": mechanism, "sasl.username": "alice"},
                    kafka_password='p"w\\d').kafka()
    got = java_kafka_config(conf)
    assert got["security.protocol"] == "SASL_SSL"
    assert got["sasl.mechanism"] == mechanism.upper()
    assert got["sasl.jaas.config"] == (
        f'{module} required username="alice" password="p\\"w\\\\d";')
    assert not {"sasl.mechanisms", "sasl.username", "sasl.password"} & got.keys()


def test_credentials_without_plain_or_scram_are_refused() -> None:
    msg = _refused({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a",
                    "sasl.password": "b"}, "sasl.username")
    assert "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512" in msg
    _refused({"sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism")


def test_gssapi_uses_the_keytab_or_the_ticket_cache() -> None:
    got = java_kafka_config({"sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                             "sasl.kerberos.keytab": "/k/c.keytab",
                             "sasl.kerberos.principal": "c@R"})
    assert got == {"sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                   "sasl.jaas.config": f'{KRB5} required useKeyTab=true storeKey=true '
                                       f'keyTab="/k/c.keytab" principal="c@R";'}
    cache = java_kafka_config({"sasl.mechanism": "GSSAPI"})["sasl.jaas.config"]
    assert cache == f"{KRB5} required useTicketCache=true;"
    _refused({"sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k"}, "sasl.kerberos.keytab")


def test_ca_file_becomes_a_pem_truststore(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(CERT)
    assert java_kafka_config({"ssl.ca.location": str(ca)}) == {
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)}
    assert java_kafka_config({"ssl.ca.pem": CERT}) == {
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": CERT}
    assert "PEM file" in _refused({"ssl.ca.location": str(tmp_path)}, "ssl.ca.location")
    _refused({"ssl.ca.location": "probe"}, "ssl.ca.location")


def test_client_certificate_and_key_become_a_pem_keystore(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(CERT)
    key.write_text(KEY)
    got = java_kafka_config({"ssl.certificate.location": str(cert),
                             "ssl.key.location": str(key), "ssl.key.password": "s"})
    assert got == {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": CERT,
                   "ssl.keystore.key": KEY, "ssl.key.password": "s"}
    assert java_kafka_config({"ssl.certificate.pem": CERT, "ssl.key.pem": KEY}) == {
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY}


def test_client_key_the_java_client_cannot_read_is_refused(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(CERT)
    key.write_text(KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY"))
    assert "PKCS#8" in _refused({"ssl.certificate.location": str(cert),
                                 "ssl.key.location": str(key)}, "ssl.key.location")
    _refused({"ssl.certificate.location": str(cert)}, "ssl.key.location")
    _refused({"ssl.certificate.location": str(tmp_path / "none.pem"),
              "ssl.key.location": str(key)}, "ssl.certificate.location")


def test_pkcs12_keystore_and_endpoint_check() -> None:
    got = java_kafka_config({"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "s",
                             "ssl.endpoint.identification.algorithm": "none"})
    assert got == {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                   "ssl.keystore.password": "s", "ssl.endpoint.identification.algorithm": ""}
    assert java_kafka_config({"ssl.endpoint.identification.algorithm": "https"}) == {
        "ssl.endpoint.identification.algorithm": "https"}
    _refused({"ssl.endpoint.identification.algorithm": "x"},
             "ssl.endpoint.identification.algorithm")


@pytest.mark.parametrize("key", ["enable.ssl.certificate.verification", "ssl.cipher.suites",
                                 "sasl.oauthbearer.client.id", "ssl.crl.location"])
def test_security_keys_without_a_mapping_are_refused(key: str) -> None:
    assert "has no mapping" in _refused({"bootstrap.servers": "b:1", key: "x"}, key)


def test_source_options_are_the_java_clients_prefixed() -> None:
    conf = {"bootstrap.servers": "b:1", "sasl.mechanism": "PLAIN", "sasl.username": "u",
            "sasl.password": "p", "group.id": "g"}
    java = source_options(conf)
    assert java["kafka.sasl.jaas.config"] == f'{PLAIN} required username="u" password="p";'
    assert java["kafka.bootstrap.servers"] == "b:1"
    assert "kafka.sasl.username" not in java and "kafka.group.id" not in java


def test_pipeline_refuses_an_unmappable_setting_before_spark(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from streamiq.pipeline import runner, session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(session, "spark_session", no_spark)
    monkeypatch.setattr(runner, "require_connector", lambda: [])
    monkeypatch.setattr(runner, "configure_logging", lambda *a: None)
    monkeypatch.setattr(runner, "stop_on_signals", threading.Event)
    settings = Settings(app="bank", kafka_config={"enable.ssl.certificate.verification": "false"})
    with pytest.raises(SystemExit) as err:
        runner.run_pipeline(settings)
    assert str(err.value.code) == (
        "streamiq pipeline: kafka_config key 'enable.ssl.certificate.verification' has no "
        "mapping for Spark's Kafka source (the Java client)")
