"""docs/sink.md's examples, run as the README says against a running ``streamiq up``
(its default app, warm-up off as in the other tests): each with its own SparkSession,
twice, and one without a token refused at once. Apart from test_up.py, whose one ``up``
its tests share in order, so the two long files run on two workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from examplerun import EXAMPLES, example, example_env, example_passes, topics_and_views
from updemo import Up

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    yield from Up(tmp_path_factory.mktemp("up-examples")).running()


@pytest.mark.timeout(1500)  # two runs of a Spark job: 534 s for one at a load of 28
def test_every_example_runs_as_readme_says_with_its_own_session(
        up: Up, tmp_path: Path) -> None:
    """docs/sink.md: with the demo running and its token exported, ``.venv/bin/python
    examples/X.py`` (here with this up's addresses as arguments). Each runs its own
    SparkSession with no PYSPARK_PYTHON or other setting of ours, and checks its view's
    answers from every node itself (exit 0 only then). Each runs twice on the same up
    (issue 50: a second run failed, its view counting the first run's events too), the
    second finding the demo token as the CLI does (``.streamiq/token`` where it runs):
    both pass, and a run leaves no checkpoint behind and no topic or view of its own."""
    examples = sorted(EXAMPLES.glob("*.py"))
    assert examples
    env = example_env(tmp_path)
    exported = {**env, "STREAMIQ_TOKEN": (up.root / "token").read_text().strip()}
    in_up_folder = tmp_path / "up-folder"  # where `streamiq up` ran: its .streamiq/token
    (in_up_folder / ".streamiq").mkdir(parents=True)
    (in_up_folder / ".streamiq" / "token").write_bytes((up.root / "token").read_bytes())
    for script in examples:
        example_passes(up, script, exported, tmp_path)
        made = topics_and_views(up)
        example_passes(up, script, env, in_up_folder)
        assert topics_and_views(up) == made, f"{script.name}'s second run made more"
    assert not list(Path(env["TMPDIR"]).glob("streamiq-example-*"))


def test_an_example_without_a_token_fails_at_once_naming_it(up: Up, tmp_path: Path) -> None:
    """Issue 50: refused, the example waited its full three minutes for counts that could
    not come. Now the client's 401 ends it before its Spark job starts, saying which
    node refused, that no token was sent, and where the token is."""
    first = f"127.0.0.1:{up.node_ports[0]}"
    done = example(up, EXAMPLES / "page_views.py", example_env(tmp_path), tmp_path)
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith("page_views: 401 UNAUTHENTICATED: "), done.stderr
    assert f"(from {first}); no token was sent" in done.stderr, done.stderr
    assert "no token was sent: export STREAMIQ_TOKEN" in done.stderr, done.stderr
    assert ".streamiq/token" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
