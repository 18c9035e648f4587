"""Every import in ``src/streamiq`` points one way: no cycle between modules or packages.

Which imports count: all of them. Module-level imports, imports under
``if TYPE_CHECKING:`` and imports inside function bodies are all edges. A lazy or
type-only import does not make a cycle safe to read: it only moves the failure from
import time to the first call (or hides it from the interpreter but not from the
reader), and "held apart by lazy imports" is exactly the tangle this test forbids.
Imports of third-party and standard-library modules are ignored.

Two graphs are checked:

* modules (``streamiq.serving.app`` -> ``streamiq.serving.node``), and
* packages, one level below ``streamiq`` (``serving`` -> ``routing``), so that a layer
  never reaches back up into a layer that depends on it (``routing`` importing from
  ``serving`` while ``serving`` imports ``routing``), even when no module-level cycle
  closes.

A failure prints the cycle, e.g. ``streamiq.serving.app -> streamiq.serving.queries ->
streamiq.serving.app``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "streamiq"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / ROOT).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every streamiq module ``module`` imports, wherever the import statement sits."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            for alias in node.names:  # ``from pkg import submodule`` names the submodule
                sub = f"{target}.{alias.name}"
                yield sub if sub in known else target


def module_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for target in _imports(name, path, known):
            # the closest streamiq module named by the import (a.b.c -> a.b if c is a name)
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith(ROOT) and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def _package(module: str) -> str:
    """``streamiq.serving.app`` -> ``streamiq.serving``; top-level modules stay whole."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, deps in modules.items():
        if name == ROOT:  # the package's public face re-exports from below; not a layer
            continue
        src = _package(name)
        graph.setdefault(src, set()).update(
            _package(d) for d in deps if d != ROOT and _package(d) != src)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that starts and ends on the same node, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_checker_sees_lazy_and_type_checking_imports() -> None:
    graph = module_graph()
    assert "streamiq.views.base" in graph["streamiq.serving.node"]
    assert len(graph) > 40  # it read the package


def test_no_module_imports_itself_back() -> None:
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_no_package_imports_itself_back() -> None:
    cycle = find_cycle(package_graph(module_graph()))
    assert cycle is None, "package import cycle: " + " -> ".join(cycle or ())


def _third_party(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - {ROOT}


def _reaches(start: str) -> set[str]:
    graph, seen, todo = module_graph(), set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, set())
    return seen


def test_one_http_client_library_per_side() -> None:
    """A node's code imports aiohttp and never httpx; the client the other way round
    (docs/design.md, "Two HTTP client libraries, on two sides of the package")."""
    modules = _modules()
    node_side = _reaches("streamiq.serving.main")
    client_side = _reaches("streamiq.client")
    node_libs = set().union(*(_third_party(modules[m]) for m in node_side))
    client_libs = set().union(*(_third_party(modules[m]) for m in client_side))
    assert "aiohttp" in node_libs and "httpx" not in node_libs
    assert "httpx" in client_libs and "aiohttp" not in client_libs
