"""The dashboard in a real browser (headless Chromium, driven by Playwright) against
three real nodes with authentication on: its data is refused without the token, it
shows every node and partition and plots write to stored per view, the map changes when
a node stops, queries typed in the box answer the right values (and, live, follow a
key's changes through /changes), and event streams end with their clients.

A screenshot of each state is saved under tests/artifacts/ (git-ignored; the folder to
keep as a CI job's artifacts). Chromium is Debian's package (``make install`` and
``make test`` put it there as root); Playwright drives it through ``executable_path``,
so nothing is downloaded.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.serving.http.dashboard import MAX_STREAMS
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
WAIT_MS = 90_000


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is missing: apt-get install -y chromium (make install does it as root)"
    return path


def _actives(page: Any) -> int:
    return int(page.locator('#map table[data-view="balances"] td[data-role="active"]').count())


def _streams_end_with_their_clients(port: int, token: str) -> None:
    """Twice as many event streams as a node takes at once, one after the other, each
    left after its first frame: a stream still running after its client left would
    keep its slot and the last ones would be refused (503)."""
    headers = {"authorization": f"Bearer {token}"}
    for _ in range(2 * MAX_STREAMS):
        with httpx.stream("GET", f"http://127.0.0.1:{port}/v1/events", headers=headers,
                          timeout=30) as r:
            assert r.status_code == 200, r.read()
            assert r.headers["content-type"].startswith("text/event-stream")
            first = next(line for line in r.iter_lines() if line)
            assert json.loads(first.removeprefix("data: "))["self"] == f"127.0.0.1:{port}"


def test_dashboard_shows_the_cluster_live_and_runs_queries(cluster: Any) -> None:
    from playwright.sync_api import expect, sync_playwright

    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(30)]
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES, rows)
    cluster.auth = True
    nodes = cluster.nodes(3, extra=["--standby-replicas", "1"])
    ports = [p for p, _ in nodes]
    cluster.settle(ports, "balances")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                     args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"http://127.0.0.1:{ports[0]}/")  # the page is open, its data is not:
            expect(page.locator("#status")).to_contain_text("token refused (401)",
                                                            timeout=WAIT_MS)
            page.fill("#token", cluster.token)
            page.click("#auth button")
            node_rows = page.locator("#nodes tbody tr")
            expect(node_rows).to_have_count(3, timeout=WAIT_MS)
            for port in ports:
                expect(page.locator(f'#nodes tr[data-node="127.0.0.1:{port}"]')).to_have_count(1)
            balances = page.locator('#map table[data-view="balances"]')
            expect(balances.locator("tr")).to_have_count(4)  # a header row and 3 partitions
            page.wait_for_function(
                "document.querySelectorAll('#map table[data-view=\"balances\"] "
                "td[data-role=\"active\"]').length === 3", timeout=WAIT_MS)
            assert _actives(page) == 3
            expect(balances.locator("caption")).to_contain_text("active replicas at most")
            expect(page.locator("#traffic tbody tr")).to_have_count(3)  # local, forwarded, fanout
            # rows written now, carrying their input time: write to stored, plotted
            more = [{"account": f"f{i}", "balance": i, "count": 1, "last_update": 0}
                    for i in range(30)]
            for _ in range(3):  # three windows of the plot at least
                produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic),
                             BALANCES, more, written_ms=int(time.time() * 1000))
                time.sleep(5)  # pacing: the page samples every 5 s
            fresh = page.locator('#freshness tbody tr:has(td:text-is("balances"))')
            expect(fresh).to_have_count(1, timeout=WAIT_MS)
            expect(fresh.locator("svg polyline")).to_have_count(2)
            page.wait_for_function(
                "document.querySelector('#freshness tbody tr td:nth-child(6)')"
                ".textContent !== '0'", timeout=WAIT_MS)
            page.screenshot(path=str(ARTIFACTS / "dashboard-3-nodes.png"), full_page=True)
            _streams_end_with_their_clients(ports[1], cluster.token)

            page.fill("#q-view", "balances")
            page.fill("#q-key", "a7")
            page.click("#query button")
            expect(page.locator("#q-answer")).to_contain_text('"balance": 7', timeout=WAIT_MS)
            expect(page.locator("#q-meta")).to_contain_text("200 in")
            expect(page.locator("#q-meta")).to_contain_text("answered by 127.0.0.1:")

            page.select_option("#q-type", "multiget")
            page.fill("#q-key", "a3, a11")
            page.click("#query button")
            expect(page.locator("#q-answer")).to_contain_text('"balance": 11', timeout=WAIT_MS)
            expect(page.locator("#q-answer")).to_contain_text('"balance": 3')

            page.select_option("#q-type", "aggregate")
            page.fill("#q-params", "agg=sum(balance)")
            page.click("#query button")
            total = 2 * sum(range(30))  # a0..a29 and f0..f29
            expect(page.locator("#q-answer")).to_contain_text(f'"sum(balance)": {total}',
                                                              timeout=WAIT_MS)

            # live: the key's changes through /changes, drawn as they come
            page.select_option("#q-type", "lookup")
            page.fill("#q-key", "a7")
            page.fill("#q-params", "")
            page.check("#q-live")
            page.click("#query button")
            expect(page.locator("#q-meta")).to_contain_text("live: 1 key", timeout=WAIT_MS)
            expect(page.locator("#q-answer")).to_contain_text('"balance": 7')
            produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES,
                         [{"account": "a7", "balance": 77, "count": 2, "last_update": 0}])
            expect(page.locator("#q-answer")).to_contain_text('"balance": 77',
                                                              timeout=WAIT_MS)
            expect(page.locator("#q-meta")).to_contain_text(re.compile(r"position \d+-\d+"))
            # the stream failing (the connection cut, as a buffering proxy might): polled
            changes = re.compile(r"/changes\?")
            page.route(changes, lambda route: route.abort())
            page.click("#query button")
            expect(page.locator("#q-meta")).to_contain_text("live (polling every 2 s): 200",
                                                            timeout=WAIT_MS)
            expect(page.locator("#q-answer")).to_contain_text('"balance": 77')
            page.unroute(changes)
            page.uncheck("#q-live")
            page.click("#query button")  # once: the polling stops
            expect(page.locator("#q-meta")).to_contain_text("200 in", timeout=WAIT_MS)

            stopped = ports[2]
            nodes[2][1].stop()
            expect(node_rows).to_have_count(2, timeout=WAIT_MS)
            gone = page.locator(f'#map td[data-node="127.0.0.1:{stopped}"]')
            expect(gone).to_have_count(0, timeout=WAIT_MS)
            page.wait_for_function(  # the survivors took over every active partition
                "document.querySelectorAll('#map table[data-view=\"balances\"] "
                "td[data-role=\"active\"]').length === 3", timeout=WAIT_MS)
            page.screenshot(path=str(ARTIFACTS / "dashboard-node-stopped.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard-node-stopped.png").stat().st_size > 10_000
