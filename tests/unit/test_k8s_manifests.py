"""deploy/k8s/streamiq.yaml is valid Kubernetes (the JSON schemas of a pinned version,
offline, strict: no unknown fields) and agrees with streamiq: probes on /health and the
node port, every STREAMIQ_* variable a real setting, the config file's keys known."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from streamiq.cli.configfile import ENV as CONFIG_ENV
from streamiq.cli.configfile import file_settings
from streamiq.cli.main import COMMANDS
from streamiq.config import Settings

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "streamiq.yaml"
KUBERNETES = "1.33"
DOCS = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def _kind(kind: str, name: str | None = None) -> dict[str, Any]:
    return next(d for d in DOCS if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name))


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_document_is_valid_kubernetes(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_nodes_are_probed_on_health_and_find_each_other_by_stable_names() -> None:
    sts = _kind("StatefulSet", "streamiq-node")
    (node,) = sts["spec"]["template"]["spec"]["containers"]
    assert node["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert "tcpSocket" in node["livenessProbe"]  # restoring (503) is alive, only not ready
    assert node["ports"] == [{"name": "http", "containerPort": 9001}]
    headless = _kind("Service", "streamiq-nodes")
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == "streamiq-nodes"
    env = {e["name"]: e for e in node["env"]}
    assert env["STREAMIQ_ADVERTISED"]["value"].startswith("$(POD_NAME).streamiq-nodes.")
    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    conf = tomllib.loads(_kind("ConfigMap")["data"]["streamiq.toml"])
    assert conf["node"]["state_dir"] == mounts["state"]


def test_every_variable_is_a_setting_and_the_config_file_is_known(tmp_path: Path) -> None:
    names = {e["name"] for d in DOCS if d["kind"] in ("StatefulSet", "Deployment")
             for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    ours = {n for n in names if n.startswith("STREAMIQ_")}
    assert ours and all(n == CONFIG_ENV or n[len("STREAMIQ_"):].lower() in Settings.model_fields
                        for n in ours), ours
    path = tmp_path / "streamiq.toml"
    path.write_text(_kind("ConfigMap")["data"]["streamiq.toml"])
    for command in ("node", "ingest", "pipeline"):  # unknown keys would raise here
        got = file_settings(path, command, COMMANDS[command][1], COMMANDS)
        Settings(**got)


DEPLOY = MANIFEST.parents[1]
ENV_REF = re.compile(r"\$\((\w+)\)")


def _containers() -> list[dict[str, Any]]:
    return [c for d in DOCS if d["kind"] in ("StatefulSet", "Deployment")
            for c in d["spec"]["template"]["spec"]["containers"]]


def test_variable_references_name_variables_defined_before_them() -> None:
    # Kubernetes expands $(NAME) in an env value only from variables defined above it
    for c in _containers():
        seen: set[str] = set()
        for e in c.get("env", []):
            for ref in ENV_REF.findall(e.get("value", "")):
                assert ref in seen, (c["name"], e["name"], ref)
            seen.add(e["name"])


def test_one_image_and_spark_executors_run_it_in_the_drivers_namespace() -> None:
    assert {c["image"] for c in _containers()} == {"streamiq:0.1.0"}
    pod = _kind("Deployment", "streamiq-pipeline")["spec"]["template"]["spec"]
    (driver,) = pod["containers"]
    assert "k8s://https://kubernetes.default.svc" in driver["args"]
    submit = {e["name"]: e.get("value") for e in driver["env"]}["PYSPARK_SUBMIT_ARGS"]
    conf = dict(c.split("=", 1) for c in submit.split("--conf")[1:] for c in [c.strip()])
    assert conf["spark.kubernetes.container.image"] == driver["image"]
    assert conf["spark.kubernetes.namespace"] == "$(POD_NAMESPACE)"
    assert conf["spark.driver.host"] == "streamiq-pipeline-driver"  # the headless service
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] \
        == pod["serviceAccountName"] == _kind("ServiceAccount")["metadata"]["name"]
    assert submit.rstrip().endswith("pyspark-shell")
    # real-time mode's slots: the views' input and shuffle partitions, and the dead
    # letters' batches (pipeline/modes.py), or the pipeline refuses to start
    from streamiq.pipeline import modes
    from streamiq.views.base import load_app

    cfg = tomllib.loads(_kind("ConfigMap")["data"]["streamiq.toml"])
    n, app = cfg["partitions"], load_app(cfg["app"])
    # a dead-letter query per input, their batches possibly at once
    needed = modes.slots([n] * len(app.views), n, n * len(app.topics))
    have = int(conf["spark.executor.instances"]) * int(conf["spark.executor.cores"])
    assert cfg.get("pipeline", {}).get("trigger") == "micro-batch" or have >= needed, \
        (have, needed)


def test_the_dockerfile_runs_the_entrypoint_that_starts_executors() -> None:
    docker = (DEPLOY / "Dockerfile").read_text()
    assert "COPY deploy/entrypoint.sh /usr/local/bin/streamiq-entrypoint" in docker
    assert 'ENTRYPOINT ["streamiq-entrypoint"]' in docker
    subprocess.run(["bash", "-n", str(DEPLOY / "entrypoint.sh")], check=True)


def _entrypoint(*args: str, env: dict[str, str] | None = None, timeout: float = 60
                ) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(DEPLOY / "entrypoint.sh"), *args], text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, "PATH": path, **(env or {})})


def test_the_entrypoint_passes_commands_to_streamiq() -> None:
    out = _entrypoint("node", "--help")
    assert out.returncode == 0 and "--advertised" in out.stdout


@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
def test_the_entrypoint_runs_a_spark_executor_from_pips_pyspark() -> None:
    """As Spark on Kubernetes starts an executor pod: the backend starts and calls the
    driver (none here: connection refused), so the class and jars are found."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = _entrypoint("executor", env={
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "a-1",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1", "SPARK_EXECUTOR_POD_NAME": "exec-1",
        "SPARK_EXECUTOR_MEMORY": "256m", "SPARK_JAVA_OPT_0": "-Dspark.network.timeout=5s"})
    assert out.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in out.stderr, out.stderr[-2000:]
    assert f"Failed to connect to /127.0.0.1:{port}" in out.stderr, out.stderr[-2000:]
