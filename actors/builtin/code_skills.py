"""Typed, bounded code-exploration skills that subagents run: search, tree, excerpt, imports.

Each skill is a plain function ``(InputModel) -> OutputModel`` with no Ray in sight; a
``SkillRegistry`` registers them from :data:`CODE_SKILLS`. Every skill stays inside its
``root`` (see :func:`actors.builtin.fs_guard.resolve_inside`), caps the size of what it returns and
reports, never raises on, unreadable, binary, oversized or unparsable files.
"""

from __future__ import annotations

import ast
import keyword
import os
import posixpath
import re
import stat
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.builtin.fs_guard import (
    PathOutsideRoot,
    Walker,
    glob_to_regex,
    is_binary_file,
    module_name,
    read_text_file,
    read_text_inside,
    real_root,
    rel_posix,
    resolve_inside,
)

__all__ = [
    "CODE_SKILLS",
    "ExcerptInput",
    "ExcerptOutput",
    "FileFact",
    "Hit",
    "ImportEdge",
    "ImportsInput",
    "ImportsOutput",
    "PathOutsideRoot",
    "SearchInput",
    "SearchOutput",
    "SkippedFile",
    "TreeInput",
    "TreeOutput",
    "list_tree",
    "python_imports",
    "read_excerpt",
    "resolve_inside",
    "search_code",
]

HIT_TEXT_CHARS = 300
EXCERPT_LINE_CHARS = 400
#: ``def``/``class`` at any depth, ``NAME =`` / ``NAME: T =`` only at module level.
_DEFINITION = re.compile(
    r"^(?:[ \t]*(?:async[ \t]+)?def[ \t]+(?P<fn>\w+)|[ \t]*class[ \t]+(?P<cn>\w+)"
    r"|(?P<var>[A-Za-z_]\w*)[ \t]*(?::[^=]*)?=(?!=))"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SkippedFile(_Model):
    """A file a skill did not read, and why (binary, too large, unreadable, escapes root...)."""

    path: str
    reason: str


class SearchInput(_Model):
    """Search ``root`` for ``pattern`` (literal unless ``regex``); ``glob`` filters file paths."""

    root: str
    pattern: str = Field(min_length=1)
    regex: bool = False
    case_sensitive: bool = False
    glob: str | None = None
    max_hits: int = Field(200, ge=1, le=10_000)
    max_file_bytes: int = Field(1_000_000, ge=1)


class Hit(_Model):
    """One matching line; ``symbol_kind`` is set when the match covers the name the line
    defines: ``def``/``async def`` -> "def", ``class`` -> "class" (at any depth, so methods
    count), and a module-level ``NAME =`` -> "def"."""

    path: str
    line: int
    text: str
    symbol_kind: Literal["def", "class"] | None = None


class SearchOutput(_Model):
    """Hits in walk order; ``truncated`` when ``max_hits`` stopped the search."""

    hits: list[Hit] = []
    files_scanned: int = 0
    truncated: bool = False
    skipped: list[SkippedFile] = []


class TreeInput(_Model):
    """List the files under ``root``, at most ``max_entries``, at most ``max_depth`` levels deep."""

    root: str
    max_entries: int = Field(2000, ge=1, le=100_000)
    max_depth: int = Field(8, ge=0, le=64)


class FileFact(_Model):
    """What the safety coordinator needs to know about one path, without touching the disk."""

    path: str
    size: int
    is_binary: bool
    is_symlink: bool
    symlink_target: str | None = None  # relative to root when inside it, else absolute
    escapes_root: bool = False


class TreeOutput(_Model):
    """Files and symlinks (not plain directories); ``truncated`` when a cap cut the listing."""

    entries: list[FileFact] = []
    truncated: bool = False


class ExcerptInput(_Model):
    """Read the lines ``line - context`` .. ``line + context`` of ``path`` (1-based)."""

    root: str
    path: str
    line: int = Field(ge=1)
    context: int = Field(5, ge=0, le=200)
    max_bytes: int = Field(1_000_000, ge=1)


class ExcerptOutput(_Model):
    """The excerpt; ``lines[0]`` is line ``start_line`` of ``path`` (relative to root)."""

    path: str
    start_line: int
    end_line: int
    lines: list[str]


class ImportsInput(_Model):
    """Import graph of the Python files under ``root``: only package ``package`` and/or only
    the files ``paths`` (relative to root) are parsed; names resolve against the whole tree."""

    root: str
    package: str | None = None
    paths: list[str] | None = Field(None, max_length=1000)
    max_files: int = Field(2000, ge=1, le=100_000)
    max_edges: int = Field(20_000, ge=1)
    max_file_bytes: int = Field(1_000_000, ge=1)


class ImportEdge(_Model):
    """``importer`` imports ``imported`` at ``path``:``line`` (both absolute module names)."""

    importer: str
    imported: str
    path: str
    line: int


class ImportsOutput(_Model):
    """Edges in file order; ``modules`` maps the parsed modules and the in-tree modules they
    import to their paths; ``errors`` lists the files that failed."""

    edges: list[ImportEdge] = []
    modules: dict[str, str] = {}
    errors: list[SkippedFile] = []
    truncated: bool = False


def _symbol_kind(line: str, span: tuple[int, int]) -> Literal["def", "class"] | None:
    """"def"/"class" when ``line`` defines a name that the match ``span`` covers whole."""
    found = _DEFINITION.match(line)
    if found is None:
        return None
    group = next(name for name in ("fn", "cn", "var") if found.group(name) is not None)
    if group == "var" and keyword.iskeyword(found.group("var")):
        return None
    start, end = found.span(group)
    if span[0] > start or span[1] < end:
        return None  # "Pool" in "class ActorPool" is not the definition of Pool
    return "class" if group == "cn" else "def"


# --- skills ----------------------------------------------------------------------------


def search_code(inp: SearchInput) -> SearchOutput:
    """Find ``pattern`` in the non-ignored text files under ``root``, as file:line hits."""
    flags = 0 if inp.case_sensitive else re.IGNORECASE
    try:
        matcher = re.compile(inp.pattern if inp.regex else re.escape(inp.pattern), flags)
    except re.error as exc:
        raise ValueError(f"invalid regex {inp.pattern!r}: {exc}") from exc
    glob = None
    if inp.glob:
        glob = (re.compile(glob_to_regex(inp.glob.lstrip("/")), re.DOTALL), "/" in inp.glob)
    root = real_root(inp.root)
    out = SearchOutput()
    for entry in Walker(root):
        if entry.error:
            out.skipped.append(SkippedFile(path=entry.rel, reason=entry.error))
            continue
        if glob and not glob[0].fullmatch(entry.rel if glob[1] else entry.rel.rsplit("/", 1)[-1]):
            continue
        text, reason = read_text_inside(root, entry.path, inp.max_file_bytes)
        if text is None:
            out.skipped.append(SkippedFile(path=entry.rel, reason=reason or "unreadable"))
            continue
        out.files_scanned += 1
        for number, line in enumerate(text.splitlines(), start=1):
            found = matcher.search(line)
            if found is None:
                continue
            if len(out.hits) >= inp.max_hits:
                out.truncated = True
                return out
            out.hits.append(
                Hit(
                    path=entry.rel,
                    line=number,
                    text=line.strip()[:HIT_TEXT_CHARS],
                    symbol_kind=_symbol_kind(line, found.span()),
                )
            )
    return out


def _fact(root: str, entry_path: str, rel: str, is_symlink: bool) -> FileFact:
    """Facts about one walked entry; reads only inside ``root``."""
    target: str | None = None
    escapes = False
    if is_symlink:
        resolved = os.path.realpath(entry_path)
        escapes = not (resolved == root or resolved.startswith(root + os.sep))
        target = resolved if escapes else rel_posix(resolved, root)
        if escapes or not os.path.isfile(resolved):
            return FileFact(
                path=rel, size=0, is_binary=False, is_symlink=True,
                symlink_target=target, escapes_root=escapes,
            )
    try:
        info = os.stat(entry_path)
        size = info.st_size
        binary = stat.S_ISREG(info.st_mode) and is_binary_file(entry_path)
    except OSError:
        size, binary = 0, False
    return FileFact(
        path=rel, size=size, is_binary=binary, is_symlink=is_symlink,
        symlink_target=target, escapes_root=escapes,
    )


def list_tree(inp: TreeInput) -> TreeOutput:
    """Facts about every non-ignored file and symlink under ``root``, sorted by path."""
    walker = Walker(inp.root, max_depth=inp.max_depth)
    out = TreeOutput()
    for entry in walker:
        if entry.error:
            continue
        if len(out.entries) >= inp.max_entries:
            out.truncated = True
            break
        out.entries.append(_fact(walker.root, entry.path, entry.rel, entry.is_symlink))
    out.truncated = out.truncated or walker.depth_limited
    return out


def read_excerpt(inp: ExcerptInput) -> ExcerptOutput:
    """Lines around ``line`` of ``path``; refuses paths outside root, binary or large files."""
    root = real_root(inp.root)
    target = resolve_inside(root, inp.path)
    try:
        text = read_text_file(str(target), inp.max_bytes)
    except OSError as exc:
        raise ValueError(f"cannot read {inp.path!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ValueError(f"refusing to read {inp.path!r}: {exc}") from exc
    lines = text.splitlines()
    if inp.line > max(len(lines), 1):
        raise ValueError(f"line {inp.line} is past the end of {inp.path!r} ({len(lines)} lines)")
    start = max(1, inp.line - inp.context)
    end = min(len(lines), inp.line + inp.context)
    return ExcerptOutput(
        path=rel_posix(target, root),
        start_line=start,
        end_line=max(start, end),
        lines=[line[:EXCERPT_LINE_CHARS] for line in lines[start - 1 : end]],
    )


def _imports_of(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int, bool]]:
    """(target, line, is_from) per import; relative targets made absolute ("" = beyond top)."""
    found: list[tuple[str, int, bool]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, False) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                if node.level > len(anchor):  # Python: "beyond top-level package"
                    found.append(("", node.lineno, True))
                    continue
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                name = f"{base}.{alias.name}" if alias.name != "*" else base
                found.append((f"{base}\x00{name}", node.lineno, True))
    return sorted(found, key=lambda item: item[1])


def python_imports(inp: ImportsInput) -> ImportsOutput:
    """Import edges between Python modules under ``root`` (relative imports resolved)."""
    root = real_root(inp.root)
    out = ImportsOutput()
    files: list[tuple[str, str, str, bool]] = []  # (module, rel, path, is_package)
    known: dict[str, str] = {}  # every module under root -> path, to tell submodules from names
    wanted = None if inp.paths is None else {posixpath.normpath(p.lstrip("/")) for p in inp.paths}
    for entry in Walker(root):
        if entry.error or not entry.rel.endswith(".py"):
            continue
        module, is_package = module_name(entry.rel, root)
        known.setdefault(module, entry.rel)
        if wanted is not None and entry.rel not in wanted:
            continue
        if inp.package and not (module == inp.package or module.startswith(inp.package + ".")):
            continue
        if len(files) >= inp.max_files:
            out.truncated = True
            continue
        files.append((module, entry.rel, entry.path, is_package))
        out.modules.setdefault(module, entry.rel)
    seen: set[tuple[str, str, int]] = set()
    for module, rel, path, is_package in files:
        text, reason = read_text_inside(root, path, inp.max_file_bytes)
        if text is None:
            out.errors.append(SkippedFile(path=rel, reason=reason or "unreadable"))
            continue
        try:
            tree = ast.parse(text, filename=rel)
        except SyntaxError as exc:
            out.errors.append(SkippedFile(path=rel, reason=f"syntax error: line {exc.lineno}: {exc.msg}"))
            continue
        for target, line, is_from in _imports_of(tree, module, is_package):
            if not target:
                out.errors.append(
                    SkippedFile(path=rel, reason=f"line {line}: relative import beyond top-level package")
                )
                continue
            if is_from:  # "base\0base.name": the submodule when it is one of ours, else the base
                base, full = target.split("\x00")
                target = full if full in known else base
            if (module, target, line) in seen:
                continue
            if len(out.edges) >= inp.max_edges:
                out.truncated = True
                return out
            seen.add((module, target, line))
            out.edges.append(ImportEdge(importer=module, imported=target, path=rel, line=line))
            if target in known:
                out.modules.setdefault(target, known[target])
    return out


#: Skill name -> function, for ``SkillRegistry`` registration.
CODE_SKILLS: dict[str, Callable[[Any], BaseModel]] = {
    "search_code": search_code,
    "list_tree": list_tree,
    "read_excerpt": read_excerpt,
    "python_imports": python_imports,
}
