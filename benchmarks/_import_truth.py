"""Ground truth for the exploration-accuracy measure: definitions and importers, from ``ast``.

Written independently of soloist's own skills (it shares no code with them), so the measure
checks the main job against a second reading of the same files. For a symbol ``X``:

* a *definition* is a module-level ``class X``, ``def X`` or ``X = <not a plain name>``
  (looking inside module-level ``if``/``try``/``with`` blocks, not inside functions), the
  assignment only in a module that does not also import ``X`` (a fallback is no definition);
* a *re-exporter* binds ``X`` at module level by importing it (``from M import X``,
  ``from M import *`` when ``X`` is public in ``M``), from the defining module or from
  another re-exporter;
* an *importer* is any other module with an import statement (anywhere in the file) that
  imports ``X`` or ``X``'s module: ``import M [as m]``, ``from P import leaf`` naming ``M``,
  ``from M import ...`` (star included), ``from R import X`` or ``*`` from a re-exporter
  ``R``, or ``import R [as r]`` / ``from P import r`` together with an ``r.X`` attribute.

Module names are dotted from the package's own name (``requests.adapters``).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

__all__ = ["PackageTruth", "truth_for"]


@dataclass
class _Module:
    name: str
    rel: str
    is_package: bool
    tree: ast.Module


@dataclass
class PackageTruth:
    """What an exact answer for ``symbol`` in the package at ``root`` contains."""

    root: str
    symbol: str
    definitions: list[str]  # "rel/path.py:line"
    defining_module: str | None
    reexporters: set[str] = field(default_factory=set)
    importers: dict[str, str] = field(default_factory=dict)  # module -> "rel:line" of its first import
    files: int = 0


def _modules(root: str) -> list[_Module]:
    top = os.path.basename(os.path.normpath(root))
    found: list[_Module] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            parts = [top, *rel[:-3].split("/")]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            try:
                with open(path, "rb") as handle:
                    tree = ast.parse(handle.read(), filename=rel)
            except (SyntaxError, ValueError, OSError):
                continue
            found.append(_Module(".".join(parts), rel, is_package, tree))
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, looking into if/try/with blocks but not into defs."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            out += _top_level(node.body)
    return out


def _absolute(module: _Module, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if node.level - 1 > len(package) - 1:
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _public_names(module: _Module) -> set[str] | None:
    """``__all__`` when it is a literal list/tuple of strings; None when absent."""
    for node in _top_level(module.tree.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None


def _exports_by_star(module: _Module, symbol: str) -> bool:
    names = _public_names(module)
    return symbol in names if names is not None else not symbol.startswith("_")


def _attributes(tree: ast.Module) -> set[str]:
    """Every dotted ``a.b.c`` chain read in the file."""
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


def truth_for(root: str, symbol: str) -> PackageTruth:
    """Definitions, re-exporters and importers of ``symbol`` in the package at ``root``."""
    modules = _modules(root)
    by_name = {m.name: m for m in modules}
    definitions: list[tuple[str, str]] = []  # (module, "rel:line")
    for m in modules:
        statements = _top_level(m.tree.body)
        imports_it = any(isinstance(n, (ast.Import, ast.ImportFrom))
                         and any((a.asname or a.name.split(".")[0]) == symbol for a in n.names) for n in statements)
        for node in statements:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == symbol:
                definitions.append((m.name, f"{m.rel}:{node.lineno}"))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == symbol for t in targets) and not imports_it and not isinstance(
                    node.value, (ast.Name, ast.Attribute)
                ):
                    definitions.append((m.name, f"{m.rel}:{node.lineno}"))
    truth = PackageTruth(
        root=root, symbol=symbol, definitions=[where for _, where in definitions],
        defining_module=definitions[0][0] if len({mod for mod, _ in definitions}) == 1 else None,
        files=len(modules),
    )
    if truth.defining_module is None:
        return truth
    home = truth.defining_module
    holders = {home}  # modules whose namespace holds the symbol
    changed = True
    while changed:
        changed = False
        for m in modules:
            if m.name in holders:
                continue
            for node in _top_level(m.tree.body):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _absolute(m, node)
                if source not in holders:
                    continue
                for alias in node.names:
                    if (alias.name == symbol and alias.asname in (None, symbol)) or (
                        alias.name == "*" and _exports_by_star(by_name[source], symbol)
                    ):
                        holders.add(m.name)
                        changed = True
                        break
                if m.name in holders:
                    break
    truth.reexporters = holders - {home}
    for m in modules:
        if m.name == home:
            continue
        lines: list[int] = []
        bound: dict[str, str] = {}  # local name -> holder module it refers to
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == home:
                        lines.append(node.lineno)
                    if alias.name in holders:
                        bound[alias.asname or alias.name] = alias.name
                        if alias.asname is None and "." in alias.name:
                            bound[alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(m, node)
                if source is None:
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if source == home or full == home:
                        lines.append(node.lineno)
                    elif source in holders and (alias.name == symbol or (
                        alias.name == "*" and _exports_by_star(by_name[source], symbol)
                    )):
                        lines.append(node.lineno)
                    elif full in holders:
                        bound[alias.asname or alias.name] = full
        if bound:
            chains = _attributes(m.tree)
            for local in bound:
                if f"{local}.{symbol}" in chains:
                    lines += [n.lineno for n in ast.walk(m.tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                              and any((a.asname or a.name) == local or a.name == local for a in n.names)]
        if lines:
            truth.importers[m.name] = f"{m.rel}:{min(lines)}"
    return truth
