"""The import graph keeps soloist's layers one way, read from the source with ``ast``.

Layers, bottom to top: ``coordinators`` (pure) and the ``cluster`` infrastructure; above them
``actors`` (the runtime inside Ray); on top the application shell ``cluster.cli``. The test
reads every module of the three packages (no import is executed) and fails on:

- ``coordinators`` importing ``ray``, ``actors`` or ``cluster``;
- ``cluster`` infrastructure (everything but ``cluster.cli``) importing ``actors`` or the
  application (``cluster.cli``, ``benchmarks``);
- any cycle between modules. ``if TYPE_CHECKING:`` imports count too: a cycle that only
  type checkers see still means two modules that cannot be understood apart;
- any import inside a function or class body, except the optional dependencies listed in
  ``LAZY_IMPORTS`` (each with the reason it is lazy).

Edges: ``import a.b`` and ``from a.b import c`` point at module ``a.b`` (or at ``a.b.c``
when ``c`` is itself a module); a package's ``__init__`` is its own node.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coordinators", "actors", "cluster")

#: Imports allowed inside functions: optional dependencies, each imported where it is used so
#: that soloist works without it. Key: top-level module name; value: why it is lazy.
LAZY_IMPORTS: dict[str, str] = {
    "mcp": "the MCP SDK is the optional `mcp` extra; only McpToolCaller's subagents need it",
    "openai": "the model transport (the official SDK) takes about 0.5 s to import; only a process whose LlmCaller "
              "calls a model needs it",
    "selenium": "browser tests of the web UI only",
    "cluster.storage.postgres": "psycopg and its pool cost each process about 70 ms and 9.6 MB; SQLite, the default "
                                "store, never needs them (cluster.storage loads PostgresStore when first asked)",
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported name, absolute (``a.b`` or ``a.b.c``)
    line: int
    local: bool  # inside a function or class body


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.depth = 0
        self.imports: list[Import] = []

    def _scoped(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _scoped

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.append(Import(self.module, alias.name, node.lineno, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
        targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        for target in targets:
            self.imports.append(Import(self.module, target, node.lineno, self.depth > 0))


def _imports() -> list[Import]:
    found: list[Import] = []
    for module, path in MODULES.items():
        collector = _Collector(module, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        found.extend(collector.imports)
    return found


IMPORTS = _imports()


def _resolve(name: str) -> str | None:
    """The soloist module ``name`` lives in (``a.b.c`` -> ``a.b`` when ``c`` is a name), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _top(name: str) -> str:
    return name.partition(".")[0]


def _lazy(target: str) -> bool:
    """An allowed lazy import: a listed package, or a listed module of our own."""
    return _top(target) in LAZY_IMPORTS or target in LAZY_IMPORTS


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _where(imp: Import) -> str:
    return f"{MODULES[imp.source].relative_to(ROOT)}:{imp.line} imports {imp.target}"


def test_the_graph_was_read():
    # Guards the other tests against passing on an empty graph.
    assert {"actors", "cluster", "coordinators", "actors.orchestrator.facade", "cluster.cli.main"} <= set(MODULES)
    assert any(i.source == "actors.handoffs._permits" and i.target == "cluster.semaphore" for i in IMPORTS)


def test_coordinators_import_no_ray_actors_or_cluster():
    bad = [_where(i) for i in IMPORTS if _in(i.source, "coordinators") and _top(i.target) in {"ray", "actors", "cluster"}]
    assert bad == [], "coordinators/ is pure: " + "; ".join(bad)


def test_cluster_infrastructure_imports_neither_actors_nor_the_application():
    bad = [
        _where(i)
        for i in IMPORTS
        if _in(i.source, "cluster") and not _in(i.source, "cluster.cli")
        and (_top(i.target) in {"actors", "benchmarks"} or _in(i.target, "cluster.cli"))
    ]
    assert bad == [], "cluster/ (but cluster/cli/) never imports actors or the application: " + "; ".join(bad)


def test_handoffs_never_import_the_orchestrator():
    # Handoffs read the frozen HandoffSettings a run hands out, not the Orchestrator facade.
    bad = [_where(i) for i in IMPORTS if _in(i.source, "actors.handoffs") and _in(i.target, "actors.orchestrator")]
    assert bad == [], "; ".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_between_modules():
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        target = _resolve(imp.target)
        if target is not None and target != imp.source:
            edges[imp.source].add(target)
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
    # The assertion above is only as good as the finder: a known cycle must be reported.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_local_imports_are_only_optional_dependencies():
    bad = [_where(i) for i in IMPORTS if i.local and not _lazy(i.target)]
    assert bad == [], (
        "import at module level (a function-local import must not hide a cycle); "
        "optional dependencies go in LAZY_IMPORTS with their reason: " + "; ".join(bad)
    )


@pytest.mark.parametrize("name", sorted(LAZY_IMPORTS))
def test_every_allowed_lazy_import_is_still_imported_lazily(name):
    # A stale entry would let a new function-local import of that module pass unexplained.
    assert any(i.local and name in (i.target, _top(i.target)) for i in IMPORTS), (
        f"nothing imports {name} lazily: remove it from LAZY_IMPORTS"
    )


def test_only_the_pydantic_ai_adapter_imports_pydantic_ai_and_nothing_imports_the_adapter():
    # pydantic-ai is the optional `soloist[pydantic-ai]` extra: importing actors, cluster or
    # coordinators must work without it, so only its own subpackage may import it.
    bad = [_where(i) for i in IMPORTS
           if (_top(i.target) == "pydantic_ai" or _in(i.target, "actors.pydantic_ai"))
           and not _in(i.source, "actors.pydantic_ai")]
    assert bad == [], "; ".join(bad)
