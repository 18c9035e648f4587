"""Fuzz every node from its own OpenAPI document (schemathesis), authentication on:
whatever the generated request, no answer is a 5xx. Bounded: a fixed number of
examples per node, derandomized so a failure reproduces."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from changelog import produce_rows
from hypothesis import HealthCheck, given, settings
from procs import HTTP

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

EXAMPLES_PER_NODE = 150


def _fuzz(base: str, headers: dict[str, str], answers: list[tuple[str, str, int]]) -> None:
    doc = HTTP.get(f"{base}/openapi.json", headers=headers, timeout=10).json()
    schema = schemathesis.openapi.from_dict(doc)

    @settings(max_examples=EXAMPLES_PER_NODE, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck), database=None)
    @given(case=schema.as_strategy())
    def fuzz(case: Any) -> None:
        r = case.call(base_url=base, headers=headers, timeout=30)
        answers.append((case.method, case.formatted_path, r.status_code))
        assert r.status_code < 500, (case.method, case.formatted_path, case.query,
                                     r.status_code, r.text[:500])

    fuzz()


def test_no_generated_request_gets_a_5xx(cluster: Any) -> None:
    cluster.auth = True
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(20)]
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES, rows)
    ports = [p for p, _ in cluster.nodes(3, app="bank,orders")]
    answers: list[tuple[str, str, int]] = []
    for port in ports:
        _fuzz(f"http://127.0.0.1:{port}", cluster.headers, answers)
    assert len(answers) >= len(ports) * 50  # it did run
    assert any(s == 200 for _, _, s in answers)  # and reached real answers, not only 4xx
