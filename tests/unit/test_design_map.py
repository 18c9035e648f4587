"""The map at the top of docs/design.md ("The serving tier at a glance") matches the code.

Every module of ``src/streamiq`` (``__init__.py`` aside) is named on a row of the map's
table, by its path below ``src/streamiq`` (``serving/http/app.py``), or is under a
folder row (``state/``: a folder row covers every module below it). A row may name
several paths (``serving/engines/aggregate.py``, ``serving/engines/scan.py``). And
every path on the map exists, so a move or a deletion cannot leave the map stale. Every
package has a docstring, and it names each of its sub-packages (``http/``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "streamiq"
DESIGN = ROOT / "docs" / "design.md"
SECTION = "## The serving tier at a glance"


def map_paths(text: str) -> set[str]:
    """The paths the map's rows name: the backquoted words of each row's first cell."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else len(text)]
    paths: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            paths.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return paths


def modules(package: Path = PACKAGE) -> list[str]:
    """Every module below ``package`` as a path relative to it, ``__init__.py`` aside."""
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                  if p.name != "__init__.py")


def off_the_map(names: list[str], paths: set[str]) -> list[str]:
    """Of ``names``, those no row names and no folder row covers."""
    folders = tuple(p for p in paths if p.endswith("/"))
    return [n for n in names if n not in paths and not n.startswith(folders)]


def test_every_module_is_on_the_map() -> None:
    missing = off_the_map(modules(), map_paths(DESIGN.read_text()))
    assert not missing, ("modules on no row of docs/design.md's map (add a row, or the "
                         f"module to its folder's row): {missing}")


def test_every_path_on_the_map_exists() -> None:
    stale = sorted(p for p in map_paths(DESIGN.read_text()) if not (PACKAGE / p).exists())
    assert not stale, f"paths on docs/design.md's map that are not in src/streamiq: {stale}"


def test_a_module_without_a_row_is_named() -> None:
    paths = map_paths(DESIGN.read_text())
    assert "serving/http/app.py" in paths and "state/" in paths
    assert "serving/engines/scan.py" in paths  # the second path of a row
    new = ["serving/http/new_route.py", "serving/new.py", "newpkg/thing.py"]
    assert off_the_map(new, paths) == new
    assert off_the_map(["state/new_store.py", "cli/new_command.py"], paths) == []


def unnamed_subpackages(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Per package below ``package`` (itself too), its sub-packages that its docstring does
    not name as ``name/``."""
    out: dict[str, list[str]] = {}
    for init in sorted(package.rglob("__init__.py")):
        here = init.parent
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        subs = sorted(d.name for d in here.iterdir() if (d / "__init__.py").exists())
        unnamed = [s for s in subs if f"{s}/" not in doc]
        if unnamed:
            out[here.relative_to(package.parent).as_posix()] = unnamed
    return out


def test_each_packages_docstring_names_its_subpackages() -> None:
    """A package's docstring is the map a newcomer reads first: every sub-package on it."""
    unnamed = unnamed_subpackages()
    assert not unnamed, f"sub-packages their package's docstring does not name: {unnamed}"


def test_every_package_has_a_docstring() -> None:
    bare = [i.parent.relative_to(PACKAGE.parent).as_posix()
            for i in sorted(PACKAGE.rglob("__init__.py"))
            if not ast.get_docstring(ast.parse(i.read_text()))]
    assert not bare, f"packages without a docstring: {bare}"
