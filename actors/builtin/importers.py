"""``find_importers``: who imports a name (or a module), answered from the whole import graph.

One call reads every Python file under ``root`` once (gitignore-aware, inside the root,
bounded in files and bytes) and answers, per requested symbol:

* its **definitions**: module-level ``class``/``def``/assignment (inside module-level
  ``if``/``try``/``with`` too); ``X = other.X`` is an alias, reported as a re-export, and an
  assignment in a module that also imports ``X`` is a fallback, not a definition;
* the **holders**: modules that bind it at module level by importing it, from the defining
  module or from another holder, until nothing changes (``from pkg import X`` where
  ``pkg/__init__.py`` re-exports it; ``from m import *`` when ``X`` is public in ``m``);
  holders that are packages or list ``X`` in ``__all__`` are reported as *re-exports*;
* its **importers**: every other module with an import statement, anywhere in the file
  (conditional and function-local ones included), that imports the name or its module:
  ``import M [as m]``, ``from P import leaf`` naming ``M``, ``from M import ...`` (star too),
  relative forms, ``from H import X`` / ``*`` from a holder ``H``, or ``import H [as h]``
  with an ``h.X`` attribute read in the file.

A symbol that names a module (``requests.adapters``, or a unique leaf such as ``adapters``)
and defines nothing is answered as that module. The answer is complete unless
``truncated`` says a bound stopped the reading.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.builtin.fs_guard import Walker, module_name, read_text_inside, real_root

__all__ = [
    "Definition",
    "FoundImporter",
    "ImportersInput",
    "ImportersOutput",
    "Reexport",
    "SymbolImporters",
    "find_importers",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImportersInput(_Model):
    """Find the importers of each of ``symbols`` (names, ``pkg.mod.Name`` or module names)."""

    root: str
    symbols: list[str] = Field(min_length=1, max_length=8)
    max_files: int = Field(20_000, ge=1, le=200_000)
    max_file_bytes: int = Field(1_000_000, ge=1)
    max_importers: int = Field(5_000, ge=1)


class Definition(_Model):
    """``symbol`` is defined at ``path``:``line`` in ``module`` (a class, a def or an assignment)."""

    module: str
    path: str
    line: int
    kind: Literal["class", "def", "assign"]


class Reexport(_Model):
    """``module`` makes the symbol available from ``source`` at ``path``:``line``; ``public``
    when ``module`` is a package or lists the name in ``__all__`` (a deliberate re-export)."""

    module: str
    source: str
    path: str
    line: int
    public: bool


_ImportHow = Literal["import", "from-module", "from", "star", "reexport", "attribute"]
"""How an importer brings a symbol in (see :class:`FoundImporter`)."""


class FoundImporter(_Model):
    """``importer`` imports the symbol (or its module) through ``imported`` at ``path``:``line``.

    ``how``: ``import`` (``import M [as m]``), ``from-module`` (``from P import M``),
    ``from`` (``from M import ...``), ``star`` (``from M import *``), ``reexport`` (the name
    from a holder), ``attribute`` (``import H`` and ``H.X`` in the file). ``conditional``:
    inside ``if``/``try``; ``local``: inside a function or class body.
    """

    importer: str
    imported: str
    path: str
    line: int
    how: _ImportHow
    conditional: bool = False
    local: bool = False


class SymbolImporters(_Model):
    """The answer for one requested symbol."""

    symbol: str
    kind: Literal["symbol", "module", "unknown"]
    modules: list[str] = []
    """The defining modules (``kind`` symbol) or the module itself (``kind`` module)."""
    definitions: list[Definition] = []
    reexports: list[Reexport] = []
    importers: list[FoundImporter] = []
    """One entry per importing module: its first qualifying import."""
    truncated: bool = False


class ImportersOutput(_Model):
    """Per-symbol answers in request order; ``files`` Python files parsed out of ``scanned``."""

    results: list[SymbolImporters] = []
    scanned: int = 0
    parsed: int = 0
    errors: list[str] = []
    truncated: bool = False


@dataclass
class _File:
    module: str
    rel: str
    is_package: bool
    text: str
    _tree: ast.Module | None = None
    _failed: bool = False

    def tree(self, errors: list[str]) -> ast.Module | None:
        if self._tree is None and not self._failed:
            try:
                self._tree = ast.parse(self.text, filename=self.rel)
            except (SyntaxError, ValueError) as exc:
                self._failed = True
                errors.append(f"{self.rel}: {type(exc).__name__}: {getattr(exc, 'msg', exc)}")
        return self._tree


@dataclass
class _Graph:
    files: dict[str, _File] = field(default_factory=dict)  # module -> file
    errors: list[str] = field(default_factory=list)
    scanned: int = 0
    truncated: bool = False

    def parsed(self) -> int:
        return sum(1 for f in self.files.values() if f._tree is not None)

    def with_text(self, *needles: str) -> list[_File]:
        return [f for f in self.files.values() if any(n in f.text for n in needles)]


def _load(inp: ImportersInput) -> _Graph:
    root = real_root(inp.root)
    graph = _Graph()
    for entry in Walker(root, max_depth=32):
        if entry.error or not entry.rel.endswith(".py"):
            continue
        graph.scanned += 1
        if len(graph.files) >= inp.max_files:
            graph.truncated = True
            continue
        text, reason = read_text_inside(root, entry.path, inp.max_file_bytes)
        if text is None:
            graph.errors.append(f"{entry.rel}: {reason}")
            continue
        module, is_package = module_name(entry.rel, root)
        graph.files.setdefault(module, _File(module, entry.rel, is_package, text))
    return graph


def _module_level(body: list[ast.stmt], conditional: bool = False) -> list[tuple[ast.stmt, bool]]:
    """Module-level statements (with whether they sit in an if/try), not inside defs."""
    out: list[tuple[ast.stmt, bool]] = []
    for node in body:
        out.append((node, conditional))
        if isinstance(node, ast.If):
            out += _module_level(node.body, True) + _module_level(node.orelse, True)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _module_level(block, True)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            out += _module_level(node.body, conditional)
    return out


def _source(file: _File, node: ast.ImportFrom) -> str | None:
    """The absolute module a ``from ... import`` reads (None: beyond the top-level package)."""
    if not node.level:
        return node.module
    package = file.module.split(".") if file.is_package else file.module.split(".")[:-1]
    if node.level > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _all_names(file: _File, errors: list[str]) -> set[str] | None:
    tree = file.tree(errors)
    if tree is None:
        return None
    for node, _ in _module_level(tree.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None


def _star_exports(graph: _Graph, module: str, name: str) -> bool:
    file = graph.files.get(module)
    if file is None:
        return False
    names = _all_names(file, graph.errors)
    return name in names if names is not None else not name.startswith("_")


def _definitions(graph: _Graph, name: str, within: str | None) -> tuple[list[Definition], list[Reexport]]:
    found: list[Definition] = []
    aliases: list[Reexport] = []
    for file in graph.with_text(name):
        if within is not None and file.module != within:
            continue
        tree = file.tree(graph.errors)
        if tree is None:
            continue
        statements = [node for node, _ in _module_level(tree.body)]
        imported = any(isinstance(node, (ast.Import, ast.ImportFrom))
                       and any((a.asname or a.name.split(".")[0]) == name for a in node.names) for node in statements)
        for node in statements:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                kind: Literal["class", "def", "assign"] = "class" if isinstance(node, ast.ClassDef) else "def"
                found.append(Definition(module=file.module, path=file.rel, line=node.lineno, kind=kind))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    continue
                if imported:  # "except ImportError: X = None" is a fallback, not a definition
                    continue
                if isinstance(node.value, (ast.Name, ast.Attribute)):
                    aliases.append(Reexport(module=file.module, source=ast.unparse(node.value), path=file.rel,
                                            line=node.lineno, public=True))
                else:
                    found.append(Definition(module=file.module, path=file.rel, line=node.lineno, kind="assign"))
    return found, aliases


def _holders(graph: _Graph, homes: set[str], name: str) -> dict[str, Reexport]:
    """Modules (other than ``homes``) whose namespace holds ``name`` through imports."""
    holders: dict[str, Reexport] = {}
    known = set(homes)
    candidates = graph.with_text(name, "import *")
    changed = True
    while changed:
        changed = False
        for file in candidates:
            if file.module in known:
                continue
            tree = file.tree(graph.errors)
            if tree is None:
                continue
            for node, _ in _module_level(tree.body):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _source(file, node)
                if source not in known:
                    continue
                if any((a.name == name and a.asname in (None, name)) or (a.name == "*" and _star_exports(graph, source, name))
                       for a in node.names):
                    names = _all_names(file, graph.errors)
                    public = file.is_package or (names is not None and name in names)
                    holders[file.module] = Reexport(module=file.module, source=source, path=file.rel,
                                                    line=node.lineno, public=public)
                    known.add(file.module)
                    changed = True
                    break
    return holders


class _ImportVisitor:
    """Every import statement of a file with its context (conditional, local).

    Imports are statements, so it walks statements only (the bodies of compound statements,
    handlers and match cases), never into expressions: a few percent of a file's nodes."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []

    def visit(self, tree: ast.Module) -> None:
        self._body(tree.body, False, False)

    def _body(self, statements: list[ast.stmt], conditional: bool, local: bool) -> None:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.found.append((node, conditional, local))
                continue
            inner_conditional = conditional or isinstance(node, (ast.If, ast.Try))
            inner_local = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    self._body([child], inner_conditional, inner_local)
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    self._body(child.body, inner_conditional, inner_local)


def _attribute_chains(tree: ast.Module) -> set[str]:
    chains: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                parts.append(value.id)
                chains.add(".".join(reversed(parts)))
    return chains


def _importer_of(graph: _Graph, file: _File, homes: set[str], holders: set[str], name: str | None) -> FoundImporter | None:
    """The first import in ``file`` that brings in ``name`` or one of ``homes``, or None."""
    tree = file.tree(graph.errors)
    if tree is None:
        return None
    visitor = _ImportVisitor()
    visitor.visit(tree)
    hits: list[FoundImporter] = []
    bound: dict[str, tuple[str, ast.stmt, bool, bool]] = {}  # local name -> (holder, statement, ...)

    def hit(imported: str, node: ast.stmt, how: _ImportHow, conditional: bool, local: bool) -> None:
        hits.append(FoundImporter(importer=file.module, imported=imported, path=file.rel, line=node.lineno,
                                  how=how, conditional=conditional, local=local))

    for node, conditional, local in visitor.found:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in homes:
                    hit(alias.name, node, "import", conditional, local)
                elif alias.name in holders and name is not None:
                    bound[alias.asname or alias.name] = (alias.name, node, conditional, local)
            continue
        source = _source(file, node)
        if source is None:
            continue
        for alias in node.names:
            full = f"{source}.{alias.name}"
            if source in homes:
                hit(source, node, "star" if alias.name == "*" else "from", conditional, local)
            elif full in homes:
                hit(full, node, "from-module", conditional, local)
            elif name is not None and source in holders and (
                alias.name == name or (alias.name == "*" and _star_exports(graph, source, name))
            ):
                hit(source, node, "reexport", conditional, local)
            elif name is not None and full in holders:
                bound[alias.asname or alias.name] = (full, node, conditional, local)
    if bound and name is not None:
        chains = _attribute_chains(tree)
        for local_name, (holder, statement, conditional, local) in bound.items():
            if f"{local_name}.{name}" in chains:
                hit(holder, statement, "attribute", conditional, local)
    return min(hits, key=lambda h: h.line) if hits else None


def _modules_named(graph: _Graph, symbol: str) -> list[str]:
    if symbol in graph.files:
        return [symbol]
    leaf = [m for m in graph.files if m.rsplit(".", 1)[-1] == symbol or m.endswith("." + symbol)]
    return leaf if len(leaf) == 1 else []


def _answer(graph: _Graph, symbol: str, max_importers: int) -> SymbolImporters:
    prefix, _, name = symbol.rpartition(".")
    within = prefix if prefix in graph.files else None
    definitions, aliases = _definitions(graph, name, within) if name.isidentifier() else ([], [])
    if definitions:
        kind: Literal["symbol", "module", "unknown"] = "symbol"
        homes = {d.module for d in definitions}
        holder_map = _holders(graph, homes, name)
        target: str | None = name
        # a file that imports it names it, names its module, or star-imports (from a holder);
        # a holder itself is only imported for the name (``from H import X``, ``H.X``)
        needles = [name, "import *", *(m.rsplit(".", 1)[-1] for m in homes)]
    else:
        modules = _modules_named(graph, symbol)
        if not modules:
            return SymbolImporters(symbol=symbol, kind="unknown", reexports=aliases)
        kind, homes, holder_map, target = "module", set(modules), {}, None
        needles = [m.rsplit(".", 1)[-1] for m in modules]
    answer = SymbolImporters(
        symbol=symbol, kind=kind, modules=sorted(homes), definitions=definitions,
        reexports=aliases + sorted(holder_map.values(), key=lambda r: (r.path, r.line)),
    )
    for file in sorted(graph.with_text(*needles), key=lambda f: f.rel):
        if file.module in homes:
            continue
        found = _importer_of(graph, file, homes, set(holder_map), target)
        if found is None:
            continue
        if len(answer.importers) >= max_importers:
            answer.truncated = True
            break
        answer.importers.append(found)
    return answer


def find_importers(inp: ImportersInput) -> ImportersOutput:
    """Definitions, re-exports and every importer of each requested symbol under ``root``."""
    graph = _load(inp)
    results = [_answer(graph, symbol.strip(), inp.max_importers) for symbol in inp.symbols if symbol.strip()]
    if graph.truncated:
        results = [r.model_copy(update={"truncated": True}) for r in results]
    return ImportersOutput(results=results, scanned=graph.scanned, parsed=graph.parsed(),
                           errors=graph.errors[:200], truncated=graph.truncated)
