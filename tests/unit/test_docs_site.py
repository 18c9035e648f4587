"""The docs site's check fails on a broken link: ``make lint``'s mkdocs line, run with the
project's mkdocs.yml settings on a small site of two pages.

A strict build only fails on warnings, and MkDocs warns of a missing page or #anchor
only as mkdocs.yml's ``validation`` asks (anchors are "info" by default), and prints no
warning for strict to count under ``--quiet`` (mkdocs 1.6.1): either change would let a
broken link through ``make test`` unseen, so both are held here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[2]


def _lint_command() -> list[str]:
    """The mkdocs line of the Makefile's lint recipe, with the venv's bin folder."""
    recipe = re.search(r"^lint:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "no lint target in the Makefile"
    line = next(x.strip() for x in recipe.group(1).splitlines() if "mkdocs" in x)
    return line.replace("$(BIN)", str(Path(sys.executable).parent)).split()


def _build(tmp_path: Path, other_page: str) -> subprocess.CompletedProcess[str]:
    """Build a site of index.md and other.md with the project's settings but its own
    pages and folders, as the lint line does."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "index.md").write_text("# Home\n\n## A section\n\nSee [other](other.md).\n")
    (docs / "other.md").write_text(other_page)
    config.update(docs_dir=str(docs), site_dir=str(tmp_path / "site"),
                  nav=[{"Home": "index.md"}, {"Other": "other.md"}])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return subprocess.run([*_lint_command(), "-f", str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_site_with_good_links_builds(tmp_path: Path) -> None:
    done = _build(tmp_path, "# Other\n\n[back](index.md#a-section) [here](#other)\n")
    assert done.returncode == 0, done.stderr


def test_each_broken_link_fails_the_build_naming_it(tmp_path: Path) -> None:
    done = _build(tmp_path, "# Other\n\n[a](index.md#no-section) [b](#nowhere) [c](missing.md)\n")
    assert done.returncode != 0
    for named in ("contains a link 'index.md#no-section', but the doc 'index.md' does not "
                  "contain an anchor '#no-section'",
                  "contains a link '#nowhere', but there is no such anchor on this page",
                  "contains a link 'missing.md', but the target is not found"):
        warned = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
        assert any(named in line for line in warned), done.stderr  # not an INFO line
