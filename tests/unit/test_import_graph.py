"""Every import in ``src/streamiq`` points one way: no cycle between modules or packages.

Which imports count: all of them. Module-level imports, imports under
``if TYPE_CHECKING:`` and imports inside function bodies are all edges. A lazy or
type-only import does not make a cycle safe to read: it only moves the failure from
import time to the first call (or hides it from the interpreter but not from the
reader), and "held apart by lazy imports" is exactly the tangle this test forbids.
Imports of third-party and standard-library modules are ignored.

Two graphs are checked:

* modules (``streamiq.serving.http.app`` -> ``streamiq.serving.node``), and
* packages, at every level: the children of each package (its modules and
  sub-packages, a sub-package counting as one), e.g. one level below ``streamiq``
  (``serving`` -> ``routing``) and one below ``streamiq.serving`` (``http`` ->
  ``cluster`` -> ``engines``), so that a layer never reaches back up into a layer that
  depends on it (``routing`` importing from ``serving`` while ``serving`` imports
  ``routing``), even when no module-level cycle closes.

A failure prints the cycle, e.g. ``streamiq.serving.http.app -> streamiq.serving.http.queries ->
streamiq.serving.http.app``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "streamiq"


@functools.cache
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


@functools.cache
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


def _child(module: str, parent: str) -> str | None:
    """The child of package ``parent`` that holds ``module``: with ``parent`` streamiq,
    ``streamiq.serving.http.app`` -> ``streamiq.serving``; a module right below
    ``parent`` stays whole. None: ``module`` is ``parent`` itself or outside it."""
    if not module.startswith(parent + "."):
        return None
    depth = parent.count(".") + 2
    return ".".join(module.split(".")[:depth])


def package_graph(modules: dict[str, set[str]], parent: str = ROOT) -> dict[str, set[str]]:
    """The imports between the children of ``parent`` (modules and sub-packages)."""
    graph: dict[str, set[str]] = {}
    for name, deps in modules.items():
        src = _child(name, parent)
        if src is None:  # the package's public face re-exports from below; not a layer
            continue
        children = {_child(d, parent) for d in deps} - {None, src}
        graph.setdefault(src, set()).update(c for c in children if c is not None)
    return graph


def packages() -> list[str]:
    """Every package of streamiq (a folder with ``__init__.py``), streamiq first."""
    return sorted(name for name, path in _modules().items() if path.name == "__init__.py")


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


def test_the_checker_sees_sub_packages() -> None:
    serving = package_graph(module_graph(), "streamiq.serving")
    assert "streamiq.serving.engines" in serving["streamiq.serving.http"]
    assert "streamiq.serving.http" not in serving["streamiq.serving.engines"]
    assert "streamiq.serving" in packages() and "streamiq.serving.http.dashboard" in packages()
    top = package_graph(module_graph())
    assert "streamiq.routing" in top["streamiq.serving"] and "streamiq.errors" in top


@pytest.mark.parametrize("parent", packages())
def test_no_package_imports_itself_back(parent: str) -> None:
    cycle = find_cycle(package_graph(module_graph(), parent))
    assert cycle is None, f"package import cycle in {parent}: " + " -> ".join(cycle or ())


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


def test_nodes_call_no_http_client_library() -> None:
    """A node asks its peers over the peer protocol only (docs/design.md, "The peer
    protocol"): nothing a node runs imports an HTTP client; the Python client uses httpx."""
    modules = _modules()
    node_libs = set().union(*(_third_party(modules[m]) for m in _reaches("streamiq.serving.main")))
    client_libs = set().union(*(_third_party(modules[m]) for m in _reaches("streamiq.client")))
    assert not node_libs & {"aiohttp", "httpx", "requests", "grpc"}, node_libs
    assert "httpx" in client_libs


WEB = {"fastapi", "starlette", "uvicorn", "httptools"}


def _layer(prefix: str) -> list[str]:
    found = [m for m in _modules() if m.startswith(prefix + ".")]
    assert found, prefix
    return found


def test_front_ends_sit_above_the_query_layer_and_it_above_cluster_and_engines() -> None:
    """Layers (issue 39): the front ends (``http/``, ``sql/``, ``peer/``) only parse and
    render, over ``query/``; ``query/`` sits above ``cluster/`` and ``engines/``; nothing
    in ``query/`` or ``cluster/`` knows HTTP (no web framework, no HTTP front end), and
    no front end reaches into another (SQL does not take HTTP's bounds)."""
    modules = _modules()
    for lower in ("streamiq.serving.query", "streamiq.serving.cluster"):
        mods = _layer(lower)
        libs = set().union(*(_third_party(modules[m]) for m in mods))
        assert not libs & WEB, (lower, libs & WEB)
        reached = set().union(*(_reaches(m) for m in mods))
        above = ("streamiq.serving.http", "streamiq.serving.sql", "streamiq.serving.peer")
        assert not any(m.startswith(above) for m in reached), (lower, reached)
    for front in ("streamiq.serving.sql", "streamiq.serving.peer"):
        reached = set().union(*(_reaches(m) for m in _layer(front)))
        assert not any(m.startswith("streamiq.serving.http") for m in reached), front
    cluster = set().union(*(_reaches(m) for m in _layer("streamiq.serving.cluster")))
    assert not any(m.startswith("streamiq.serving.query") for m in cluster)


def test_the_peer_server_dispatches_on_the_typed_query_not_on_routes() -> None:
    """Adding a query type needs its module in ``query/`` and its renderers: the peer
    server names no query type (a lookup is answered inline by its kind, the rest read
    as any registered type, ``codec.decode``, and run, ``Queries.run``) and no route."""
    path = _modules()["streamiq.serving.peer.server"]
    names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
    names |= {a.asname or a.name for n in ast.walk(ast.parse(path.read_text()))
              if isinstance(n, ast.ImportFrom) for a in n.names}
    from streamiq.serving.query.model import KINDS

    typed = {cls.__name__ for cls in KINDS.values()}
    assert not names & typed, names & typed
    assert "streamiq.serving.routes" not in module_graph()["streamiq.serving.peer.server"]


def test_engines_know_no_transport() -> None:
    """The query engines compute answers from stores, whatever asked: nothing they
    import reaches a web framework or a peer (another front end, SQL, calls them too)."""
    modules = _modules()
    engines = [m for m in modules if m.startswith("streamiq.serving.engines.")]
    assert engines
    reached = set().union(*(_reaches(m) for m in engines))
    libs = set().union(*(_third_party(modules[m]) for m in reached))
    assert not libs & {"fastapi", "starlette", "uvicorn", "aiohttp", "httpx"}, libs
    assert not any(m.startswith(("streamiq.serving.http", "streamiq.serving.cluster"))
                   for m in reached), reached


def test_the_query_layer_needs_no_web_framework() -> None:
    """The query layer (typed queries in, typed answers out) is callable by any front end:
    its modules import no web framework and reach nothing of the HTTP front end."""
    modules = _modules()
    layer = [m for m in modules if m.startswith("streamiq.serving.query.")]
    assert layer
    libs = set().union(*(_third_party(modules[m]) for m in layer))
    assert not libs & {"fastapi", "starlette", "uvicorn"}, libs
    reached = set().union(*(_reaches(m) for m in layer))
    assert not any(m.startswith("streamiq.serving.http") for m in reached), reached


def test_a_new_query_type_is_one_module_in_query_plus_its_declarations() -> None:
    """Top-k is the proof (issues 39, 48): its typed query, owners' parts and merge are
    ``query/topk.py``, registered by one import in ``query/kinds.py``; beyond that only
    its declarations name it: its row in the route table (the HTTP route is made from
    its fields, ``http/declared.py``) and its SQL planner rule (``sql/pushdowns.py``; the
    SQL engine runs any pushed query). The peer protocol, the coordinator, the engines,
    the peer server, the HTTP routes and SQL's executor and engine carry it without a
    line of their own (``tests/integration/test_query_type_example.py`` adds a type from
    outside the product the same way)."""
    import re

    pattern = re.compile(r"\bTopK\w*|\bTOP_K\b|query\.topk\b|import [^\n]*\btopk\b")
    naming = sorted(str(path.relative_to(SRC / ROOT)) for path in _modules().values()
                    if pattern.search(path.read_text()))
    assert naming == ["serving/query/kinds.py", "serving/query/topk.py", "serving/routes.py",
                      "serving/sql/pushdowns.py"], naming


def test_front_ends_import_neither_the_cluster_nor_the_peer_server() -> None:
    """Issue 48: the HTTP routes, the lean path and SQL speak the query layer's
    vocabulary (``query/answers.py``: where a one-partition query was answered;
    ``query/codec.py``: a lookup's request, a replica's reply read); none of their
    modules imports ``cluster/`` (peer frames, the coordinator, placement) or
    ``peer/``. The composition root (``serving/main.py``) wires them together."""
    graph = module_graph()
    fronts = [m for m in graph if m.startswith(("streamiq.serving.http.",
                                                 "streamiq.serving.sql."))]
    assert len(fronts) > 30, fronts
    direct = {m: sorted(d for d in graph[m] if d.startswith(
        ("streamiq.serving.cluster", "streamiq.serving.peer"))) for m in fronts}
    assert {m: d for m, d in direct.items() if d} == {}


#: the HTTP server the node and the ingest share, and what the node plugs into it
_SERVER = tuple(f"streamiq.serving.http.{m}" for m in (
    "asgi", "flow", "http_limits", "leanserve", "protocol", "server"))
_NODE = ("streamiq.serving.query", "streamiq.serving.cluster", "streamiq.serving.peer",
         "streamiq.serving.node", "streamiq.serving.routes", "streamiq.serving.http.fastpath",
         "streamiq.serving.http.metrics", "streamiq.serving.http.app")


def test_the_http_server_is_generic() -> None:
    """Issue 48: the HTTP server (its protocol, limits, lean serving, ASGI cycles) knows
    neither the node nor the ingest: the node's lean key lookups (``LeanGets``) and its
    peer protocol on the same port (``SamePort``) are plugged in by the composition root,
    not imported; the ingest, which serves on it too, reaches none of the node's query
    layer either. It serves any ASGI app and imports no web framework (its refusals are
    rendered by the one HTTP error mapping, ``_http.problem``)."""
    modules = _modules()
    for m in _SERVER:
        reached = _reaches(m)
        assert not [r for r in reached if r.startswith(_NODE)], (m, sorted(
            r for r in reached if r.startswith(_NODE)))
        libs = set().union(*(_third_party(modules[r]) for r in reached if r in modules))
        assert not libs & {"fastapi", "starlette", "uvicorn"}, (m, libs)
    ingest = [m for m in _modules() if m.startswith("streamiq.ingest.")]
    reached = set().union(*(_reaches(m) for m in ingest))
    assert not [r for r in reached if r.startswith(_NODE)], sorted(
        r for r in reached if r.startswith(_NODE))


_CONNECTS = {"create_connection", "open_connection", "sock_connect"}


def _connects(path: Path) -> set[str]:
    """The connecting calls a module makes (``loop.create_connection(...)`` and kin)."""
    return {n.func.attr for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _CONNECTS}


def test_only_cluster_opens_peer_connections() -> None:
    """One peer transport (issue 48): of the serving node's modules only ``cluster/``
    connects to a peer, for calls (``hop.py``) and streams (``stream.py``: a live
    subscription's events, a partition snapshot's file); the front ends, the live
    subscriptions and the snapshot copies carry what it gives them."""
    modules = _modules()
    serving = [m for m in modules if m.startswith("streamiq.serving.")]
    outside = {m: c for m in serving if not m.startswith("streamiq.serving.cluster.")
               and (c := _connects(modules[m]))}
    assert outside == {}, outside
    inside = {m for m in serving if m.startswith("streamiq.serving.cluster.")
              and _connects(modules[m])}
    assert inside == {"streamiq.serving.cluster.hop", "streamiq.serving.cluster.stream"}, inside


_HEDGES = {"hedged", "hedge_won"}  # sending a hedge and counting its win (cluster/hedge.py)


def _hedges(path: Path) -> set[str]:
    """The hedging calls a module makes (``hedging.hedged(...)`` and kin)."""
    return {n.func.attr for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _HEDGES}


def test_one_module_hedges() -> None:
    """One lookup pipeline (issue 48): a hedge is sent, and its win counted, by
    ``cluster/race.py`` alone (the one-partition call every lookup takes, the lean
    path's too, and a scatter-gather's part); the lean path carries its answer."""
    modules = _modules()
    hedging = {m for m, path in modules.items() if _hedges(path)}
    assert hedging == {"streamiq.serving.cluster.race"}, hedging
