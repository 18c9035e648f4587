"""Every relative link of README.md resolves: the file exists, and an ``#anchor`` names a
heading of it (or of README itself).

``mkdocs build --strict`` (in ``make lint``) checks the links between the pages of
``docs/``; README is no page of the site, so its links into ``docs/`` are checked here.
An anchor must be one both renderers make of the same heading: GitHub's (where README is
read) and Python-Markdown's ``toc`` (the site's), so a link works in both places.
External links (``http:``, ``https:``, ``mailto:``) are not checked: no network.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

__all__ = ["anchors", "broken_links", "github_slug", "toc_slug"]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks: a link or heading inside one is code."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _plain(heading: str) -> str:
    """A heading's text as rendered: inline code, emphasis and link targets dropped."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*]", "", text)


def github_slug(heading: str) -> str:
    """GitHub's anchor: lower case, punctuation dropped, each space a hyphen."""
    text = _plain(heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def toc_slug(heading: str) -> str:
    """Python-Markdown's ``toc`` anchor (MkDocs' default): ASCII, punctuation dropped,
    runs of spaces and hyphens one hyphen."""
    text = unicodedata.normalize("NFKD", _plain(heading))
    text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode()).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(text: str) -> set[str]:
    """The anchors both renderers give a Markdown text's headings (a repeated heading's
    later anchors differ between them, so only its first counts)."""
    made: set[str] = set()
    for line in _prose(text):
        if m := HEADING.match(line):
            gh, toc = github_slug(m.group(1)), toc_slug(m.group(1))
            if gh == toc:
                made.add(gh)
    return made


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of the Markdown file ``path`` that does not resolve, with why."""
    text = path.read_text()
    broken = []
    for line in _prose(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.is_relative_to(root) or not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                broken.append(f"{target}: no heading makes #{anchor}")
    return broken


def test_every_relative_link_of_the_readme_resolves() -> None:
    assert not broken_links(README), broken_links(README)


def test_the_readme_links_into_the_docs() -> None:
    """The README's map of the docs: one link to each page of the site's nav."""
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    linked = {t.partition("#")[0] for t in LINK.findall(README.read_text())}
    assert nav and not {f"docs/{page}" for page in nav if page != "index.md"} - linked


@pytest.mark.parametrize(("heading", "slug"), [
    ("Quick start", "quick-start"),
    ("What `streamiq up` runs, and restarts", "what-streamiq-up-runs-and-restarts"),
    ("Real-time mode (issue 37)", "real-time-mode-issue-37"),
    ("The [SQL](sql.md) page", "the-sql-page"),
])
def test_both_renderers_agree_on_plain_headings(heading: str, slug: str) -> None:
    assert github_slug(heading) == toc_slug(heading) == slug


def test_a_heading_the_renderers_disagree_on_makes_no_anchor() -> None:
    # GitHub keeps each hyphen ("a---b"), toc makes one ("a-b"): a link works in one only
    assert anchors("# a - b\n") == set()


def test_a_missing_file_or_anchor_is_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## A section\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n[ok](docs/page.md) [ok](docs/page.md#a-section) [ok](#top)\n"
        "[web](https://example.com/x#y) ![img](missing.png)\n"
        "```\n[in code](docs/none.md)\n```\n"
        "[gone](docs/none.md) [bad](docs/page.md#no-section) [self](#nowhere)\n"
        "[out](../outside.md)\n")
    assert broken_links(readme, tmp_path) == [
        "docs/none.md: no such file", "docs/page.md#no-section: no heading makes #no-section",
        "#nowhere: no heading makes #nowhere", "../outside.md: no such file"]
