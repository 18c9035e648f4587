"""``kafka.*`` options for Spark's Kafka connector, from librdkafka's settings.

``Settings.kafka()`` is spelled for librdkafka (every other streamiq client is
confluent-kafka); Spark's ``kafka`` source hands its ``kafka.*`` options to the Java
client, which spells security differently. :func:`source_options` maps what differs:

* ``security.protocol`` upper-cased (librdkafka takes ``sasl_ssl``);
* ``sasl.mechanisms`` -> ``sasl.mechanism``; ``sasl.username``/``sasl.password`` ->
  ``sasl.jaas.config`` for PLAIN and SCRAM; GSSAPI -> a ``Krb5LoginModule`` entry, of
  ``sasl.kerberos.keytab``/``sasl.kerberos.principal`` or else the ticket cache
  (OAUTHBEARER is refused);
* ``ssl.ca.location`` (a PEM file) -> a PEM truststore, ``ssl.ca.pem`` -> its
  certificates; ``ssl.certificate.location``/``ssl.key.location`` (PEM files, the key
  PKCS#8) or ``.pem`` -> a PEM keystore; ``ssl.keystore.location`` (PKCS#12 in
  librdkafka) -> a PKCS12 keystore; ``ssl.endpoint.identification.algorithm`` ``none``
  -> empty (the Java client's "off").

Keys Spark's source sets itself (group, offsets, deserializers) are left out: the same
``kafka_config`` also serves the nodes' consumers. Any other ``sasl.*``/``ssl.*`` key,
and a value the Java client cannot take, is refused with :class:`JavaKafkaConfigError`
naming the key; everything else passes unchanged (the Java client ignores, with a
warning, what it does not know).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["JavaKafkaConfigError", "java_kafka_config", "source_options"]

#: Spark's kafka source manages these itself (and refuses some of them)
_SPARK_OWNS = frozenset({"group.id", "auto.offset.reset", "enable.auto.commit",
                         "key.deserializer", "value.deserializer", "interceptor.classes"})
#: librdkafka keys with the same name and meaning in the Java client
_SAME = frozenset({"ssl.key.password", "ssl.keystore.password", "sasl.kerberos.service.name"})
_JAAS = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
         "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
         "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
_KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
_USED_BELOW = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms",
                         "sasl.username", "sasl.password", "sasl.kerberos.keytab",
                         "sasl.kerberos.principal", "ssl.ca.location", "ssl.ca.pem",
                         "ssl.certificate.location", "ssl.certificate.pem",
                         "ssl.key.location", "ssl.key.pem", "ssl.keystore.location",
                         "ssl.endpoint.identification.algorithm"})
_SECURITY = ("sasl.", "ssl.", "ssl_", "enable.ssl.")


class JavaKafkaConfigError(ValueError):
    """A librdkafka setting Spark's Kafka connector (the Java client) cannot be given."""


def _refuse(key: str, why: str) -> JavaKafkaConfigError:
    return JavaKafkaConfigError(f"kafka_config key '{key}' {why} for Spark's Kafka source "
                                "(the Java client)")


def _quoted(value: str) -> str:
    """A JAAS option value, double-quoted (Java's parser reads backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f"{k}={v}" for k, v in options.items()) + ";"


def _sasl(conf: Mapping[str, str]) -> dict[str, str]:
    mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "")).upper()
    if mechanism not in ("", "GSSAPI", *_JAAS):
        raise _refuse("sasl.mechanism", f"{mechanism} has no mapping")
    out = {"sasl.mechanism": mechanism} if mechanism else {}
    if mechanism == "GSSAPI":  # librdkafka runs kinit; the Java client reads its cache
        out["sasl.jaas.config"] = _jaas(_KRB5, useTicketCache="true")
    if "sasl.username" in conf or "sasl.password" in conf:
        if mechanism not in _JAAS:
            raise _refuse("sasl.username", "needs sasl.mechanism PLAIN, SCRAM-SHA-256 or "
                          f"SCRAM-SHA-512 (not {mechanism or 'GSSAPI, the default'})")
        out["sasl.jaas.config"] = _jaas(
            _JAAS[mechanism], username=_quoted(conf.get("sasl.username", "")),
            password=_quoted(conf.get("sasl.password", "")))
    if "sasl.kerberos.keytab" in conf:
        if mechanism != "GSSAPI" or "sasl.kerberos.principal" not in conf:
            raise _refuse("sasl.kerberos.keytab", "needs sasl.kerberos.principal and "
                          "sasl.mechanism GSSAPI")
        out["sasl.jaas.config"] = _jaas(
            _KRB5, useKeyTab="true", storeKey="true",
            keyTab=_quoted(conf["sasl.kerberos.keytab"]),
            principal=_quoted(conf["sasl.kerberos.principal"]))
    return out


def _pem(conf: Mapping[str, str], key: str) -> str | None:
    """``<key>.pem`` inline, or the text of the file ``<key>.location``."""
    if f"{key}.pem" in conf:
        return conf[f"{key}.pem"]
    if f"{key}.location" not in conf:
        return None
    try:
        return Path(conf[f"{key}.location"]).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise _refuse(f"{key}.location", f"names no readable PEM file ({exc})") from None


def _truststore(conf: Mapping[str, str]) -> dict[str, str]:
    if "ssl.ca.pem" in conf:
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": conf["ssl.ca.pem"]}
    if "ssl.ca.location" not in conf:
        return {}
    if not Path(conf["ssl.ca.location"]).is_file():  # librdkafka: also a folder or "probe"
        raise _refuse("ssl.ca.location", "must name a PEM file (not a folder or 'probe')")
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": conf["ssl.ca.location"]}


def _keystore(conf: Mapping[str, str]) -> dict[str, str]:
    if "ssl.keystore.location" in conf:
        return {"ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": conf["ssl.keystore.location"]}
    cert, key = _pem(conf, "ssl.certificate"), _pem(conf, "ssl.key")
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        missing = "ssl.certificate" if cert is None else "ssl.key"
        raise _refuse(f"{missing}.location", "is needed too (a client certificate and its key)")
    if "-----BEGIN RSA PRIVATE KEY" in key or "-----BEGIN EC PRIVATE KEY" in key:
        raise _refuse("ssl.key.location", "holds a PKCS#1/SEC1 key; the Java client reads "
                      "PKCS#8 only (openssl pkcs8 -topk8 converts it)")
    return {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert,
            "ssl.keystore.key": key}


def _ssl(conf: Mapping[str, str]) -> dict[str, str]:
    out = {**_truststore(conf), **_keystore(conf)}
    algorithm = conf.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.lower() not in ("none", "https"):
            raise _refuse("ssl.endpoint.identification.algorithm", "must be https or none")
        out["ssl.endpoint.identification.algorithm"] = (
            "" if algorithm.lower() == "none" else "https")
    return out


def java_kafka_config(kafka: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's configuration for librdkafka's ``kafka`` (refuses what it cannot)."""
    conf = {k: str(v) for k, v in kafka.items()}
    out: dict[str, str] = {}
    for key, value in conf.items():
        if key in _SPARK_OWNS or key in _USED_BELOW:
            continue
        if key.startswith(_SECURITY) and key not in _SAME:
            raise _refuse(key, "has no mapping")
        out[key] = value
    if "security.protocol" in conf:
        out["security.protocol"] = conf["security.protocol"].upper()
    return {**out, **_sasl(conf), **_ssl(conf)}


def source_options(kafka: Mapping[str, Any]) -> dict[str, str]:
    """The ``kafka.*`` options of a reader of Spark's ``kafka`` format: librdkafka's
    settings mapped to the Java client's."""
    return {f"kafka.{k}": v for k, v in java_kafka_config(kafka).items()}
