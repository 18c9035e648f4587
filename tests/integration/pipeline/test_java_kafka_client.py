"""The mapped ``kafka.*`` options as the real Java client (the connector's kafka-clients)
reads them: its config validation, JAAS parser and SSL engine factory, no broker needed."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from streamiq.pipeline.connector import require_connector
from streamiq.pipeline.java_kafka import java_kafka_config

pytestmark = pytest.mark.integration

# For each configuration: the protocol, the JAAS entry as parsed (module, sorted options),
# and whether the SSL engine factory loaded a keystore and a truststore.
_CHECK = """
import java.nio.file.*; import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.security.JaasContext;
import org.apache.kafka.common.security.ssl.DefaultSslEngineFactory;
public class Check {
  public static void main(String[] a) throws Exception {
    Map<String, Map<String, Object>> all = new TreeMap<>();
    for (String line : Files.readAllLines(Path.of(a[0]))) {
      String[] p = line.split("\\t", -1);
      all.computeIfAbsent(p[0], k -> new HashMap<>())
         .put(p[1], new String(Base64.getDecoder().decode(p[2]), "UTF-8"));
    }
    for (var e : all.entrySet()) {
      Map<String, Object> m = new HashMap<>(e.getValue());
      m.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
      m.put("value.deserializer", m.get("key.deserializer"));
      Map<String, Object> v = new HashMap<>(new ConsumerConfig(m).values());
      String proto = (String) v.get("security.protocol"), out = e.getKey() + " " + proto;
      if (proto.startsWith("SASL")) {
        var entry = JaasContext.loadClientContext(v).configurationEntries().get(0);
        out += " " + entry.getLoginModuleName() + " " + new TreeMap<>(entry.getOptions());
      }
      if (proto.endsWith("SSL")) {
        DefaultSslEngineFactory f = new DefaultSslEngineFactory();
        f.configure(v);
        out += " keystore=" + (f.keystore() != null) + " truststore=" + (f.truststore() != null);
      }
      System.out.println(out);
    }
  }
}
"""


def _pkcs8(pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _java_reads(confs: dict[str, dict[str, str]], tmp_path: Path) -> list[str]:
    rows = [f"{name}\t{k}\t{base64.b64encode(v.encode()).decode()}"
            for name, conf in confs.items() for k, v in java_kafka_config(conf).items()]
    (tmp_path / "confs.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "Check.java").write_text(_CHECK)
    clients = [j for j in require_connector() if Path(j).name.startswith("kafka-clients-")]
    jars = Path(pyspark.__file__).parent / "jars" / "*"  # slf4j for kafka-clients
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    done = subprocess.run([java, "-cp", f"{clients[0]}:{jars}", str(tmp_path / "Check.java"),
                           str(tmp_path / "confs.tsv")],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_java_client_reads_the_mapped_security_settings(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("client.example")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "k.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    leaf.cert_chain_pems[0].write_to_path(str(cert_file))
    key_file.write_bytes(_pkcs8(leaf.private_key_pem.bytes()))
    base = {"bootstrap.servers": "127.0.0.1:1"}
    confs = {
        "a-plain": {**base, "security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN",
                    "sasl.username": "alice", "sasl.password": 'p"w\\d ;x',
                    "ssl.ca.location": str(ca_file),
                    "ssl.endpoint.identification.algorithm": "none"},
        "b-scram": {**base, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
                    "sasl.password": "s"},
        "c-mtls": {**base, "security.protocol": "ssl", "ssl.ca.location": str(ca_file),
                   "ssl.certificate.location": str(cert_file),
                   "ssl.key.location": str(key_file)},
        "d-keytab": {**base, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
                     "sasl.kerberos.keytab": "/k/c.keytab",
                     "sasl.kerberos.principal": "c@R"},
    }
    assert _java_reads(confs, tmp_path) == [
        "a-plain SASL_SSL org.apache.kafka.common.security.plain.PlainLoginModule "
        '{password=p"w\\d ;x, username=alice} keystore=false truststore=true',
        "b-scram SASL_PLAINTEXT org.apache.kafka.common.security.scram.ScramLoginModule "
        "{password=s, username=bob}",
        "c-mtls SSL keystore=true truststore=true",
        "d-keytab SASL_PLAINTEXT com.sun.security.auth.module.Krb5LoginModule "
        "{keyTab=/k/c.keytab, principal=c@R, storeKey=true, useKeyTab=true}",
    ]
