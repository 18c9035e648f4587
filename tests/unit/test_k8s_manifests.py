"""deploy/k8s/streamiq.yaml is valid Kubernetes (the JSON schemas of a pinned version,
offline, strict: no unknown fields) and agrees with streamiq: probes on /health and the
node port, every STREAMIQ_* variable a real setting, the config file's keys known."""

from __future__ import annotations

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
