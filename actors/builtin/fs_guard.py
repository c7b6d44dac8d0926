"""Filesystem helpers shared by the code skills: containment, gitignore, binary check, walking.

Pure Python, no Ray. Every path a skill touches goes through :func:`resolve_inside`, so a
symlink or a ``..`` can never lead a skill out of the root it was given.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from actors.exceptions import PathOutsideRoot

__all__ = [
    "ALWAYS_SKIP",
    "BINARY_SNIFF_BYTES",
    "IgnoreRule",
    "WalkEntry",
    "Walker",
    "glob_to_regex",
    "is_binary_file",
    "is_ignored",
    "module_name",
    "parse_gitignore",
    "read_text_file",
    "read_text_inside",
    "real_root",
    "rel_posix",
    "resolve_inside",
]

#: Directory names never walked, whatever the ``.gitignore`` files say.
ALWAYS_SKIP = frozenset({".git", "__pycache__", ".venv", "node_modules"})
#: A file with a NUL byte in its first this-many bytes is binary.
BINARY_SNIFF_BYTES = 8192


def real_root(root: str | os.PathLike[str]) -> str:
    """The real path of ``root``; ``ValueError`` naming it when it is not a directory."""
    resolved = os.path.realpath(os.fspath(root))
    if not os.path.isdir(resolved):
        raise ValueError(f"root {os.fspath(root)!r} is not a directory")
    return resolved


def _contained(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_inside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Resolve ``path`` (absolute, or relative to ``root``) and prove it stays inside ``root``.

    Both a lexical escape (an absolute path elsewhere, a ``..`` climbing out) and a real one
    (a symlink on the way pointing outside) raise :class:`PathOutsideRoot` naming the path.
    """
    root_text = os.fspath(root)
    root_abs = os.path.abspath(root_text)
    root_real = os.path.realpath(root_text)
    raw = os.fspath(path)
    if "\x00" in raw:
        raise PathOutsideRoot(f"path {raw!r} contains a NUL byte")
    lexical = os.path.normpath(raw if os.path.isabs(raw) else os.path.join(root_abs, raw))
    if not (_contained(lexical, root_abs) or _contained(lexical, root_real)):
        raise PathOutsideRoot(f"path {raw!r} is outside root {root_text!r}")
    resolved = os.path.realpath(lexical)
    if not _contained(resolved, root_real):
        raise PathOutsideRoot(
            f"path {raw!r} resolves through a symlink to {resolved!r}, outside root {root_text!r}"
        )
    return Path(resolved)


def rel_posix(path: str | os.PathLike[str], root_real: str) -> str:
    """``path`` relative to ``root_real`` with forward slashes ("." for the root itself)."""
    return Path(os.path.relpath(os.fspath(path), root_real)).as_posix()


def is_binary_file(path: str | os.PathLike[str]) -> bool:
    """True when the first 8 KiB of ``path`` hold a NUL byte (``OSError`` propagates)."""
    with open(path, "rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF_BYTES)


def read_text_file(path: str, max_bytes: int) -> str:
    """Text of a regular, non-binary file of at most ``max_bytes``; ``ValueError`` says why not."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    if info.st_size > max_bytes:
        raise ValueError(f"too large ({info.st_size} bytes > {max_bytes})")
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ValueError("binary file")
    return data.decode("utf-8", errors="replace")


def read_text_inside(root: str, entry_path: str, max_bytes: int) -> tuple[str | None, str | None]:
    """(text, None) or (None, reason) for a file that must stay inside ``root``; never raises."""
    try:
        target = resolve_inside(root, entry_path)
        if target.is_dir():
            return None, "symlink to a directory (not followed)"
        return read_text_file(str(target), max_bytes), None
    except PathOutsideRoot:
        return None, "symlink escapes root"
    except ValueError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"


def module_name(rel: str, root: str) -> tuple[str, bool]:
    """(dotted module name, is_package) for a ``.py`` path; packages climb ``__init__.py``s."""
    parts = rel[:-3].split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    dirs = rel.split("/")[:-1]
    top = len(dirs)
    while top > 0 and os.path.isfile(os.path.join(root, *dirs[:top], "__init__.py")):
        top -= 1
    if top < len(dirs):  # inside a regular package: name from the outermost package down
        parts = parts[top:]
    if top == 0 and os.path.isfile(os.path.join(root, "__init__.py")):
        parts = [os.path.basename(root), *parts]  # the root is itself a package
    return ".".join(parts) or rel, is_package


# --- gitignore -------------------------------------------------------------------------


def glob_to_regex(pattern: str) -> str:
    """Translate one gitignore glob (``*``, ``?``, ``[...]``, ``**``, ``\\`` escapes) to a regex."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            if pattern.startswith("**", i):
                end = i + 2
                whole_segment = (i == 0 or pattern[i - 1] == "/") and (
                    end == n or pattern[end] == "/"
                )
                if whole_segment and end == n:
                    out.append(".*")
                elif whole_segment:
                    out.append("(?:.*/)?")
                    end += 1  # the "/" after "**" is part of the optional group
                else:
                    out.append("[^/]*")
                i = end
                continue
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = i + 1
            if end < n and pattern[end] in "!^":
                end += 1
            if end < n and pattern[end] == "]":
                end += 1
            while end < n and pattern[end] != "]":
                end += 1
            if end >= n:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body[0] in "!^":
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        elif char == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class IgnoreRule:
    """One line of a ``.gitignore``; ``base`` is its directory relative to the root ("" at top)."""

    base: str
    pattern: str
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    anchored: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether this rule's pattern matches ``rel`` (posix, relative to the walk root)."""
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1 :]
        subject = rel if self.anchored else rel.rsplit("/", 1)[-1]
        return self.regex.fullmatch(subject) is not None


def parse_gitignore(text: str, base: str = "") -> tuple[IgnoreRule, ...]:
    """Parse a ``.gitignore``'s text; comments, blanks and bare ``!`` lines are dropped."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "  # "\ " keeps one escaped trailing space
        line = stripped
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\#") or line.startswith("\\!"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        if not line:
            continue
        rules.append(
            IgnoreRule(
                base=base,
                pattern=raw,
                regex=re.compile(glob_to_regex(line), re.DOTALL),
                negated=negated,
                dir_only=dir_only,
                anchored=anchored,
            )
        )
    return tuple(rules)


def is_ignored(rules: tuple[IgnoreRule, ...], rel: str, is_dir: bool) -> bool:
    """Git's rule: the last matching rule decides (outer files first, nested ones after)."""
    ignored = False
    for rule in rules:
        if rule.matches(rel, is_dir):
            ignored = not rule.negated
    return ignored


# --- walking ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WalkEntry:
    """A non-directory entry (or a symlink of any kind) met during a walk, or a walk error."""

    rel: str  # posix, relative to the real root
    path: str  # absolute, not resolved (a symlink stays a symlink)
    is_symlink: bool
    error: str | None = None


class Walker:
    """Deterministic (sorted) walk of a root that prunes ignored directories.

    Never descends into a symlinked directory, so it cannot leave the root or loop.
    ``depth_limited`` becomes true when ``max_depth`` stopped it from entering a directory.
    """

    def __init__(self, root: str | os.PathLike[str], *, max_depth: int = 8) -> None:
        self.root = real_root(root)  # invariant: a real, existing directory
        self.max_depth = max_depth
        self.depth_limited = False

    def __iter__(self) -> Iterator[WalkEntry]:
        yield from self._walk(self.root, "", 0, ())

    def _load_rules(self, directory: str, rel: str) -> tuple[IgnoreRule, ...]:
        candidate = os.path.join(directory, ".gitignore")
        try:
            if not stat.S_ISREG(os.lstat(candidate).st_mode):
                return ()
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                return parse_gitignore(handle.read(), rel)
        except OSError:
            return ()

    def _walk(
        self, directory: str, rel: str, depth: int, rules: tuple[IgnoreRule, ...]
    ) -> Iterator[WalkEntry]:
        rules = rules + self._load_rules(directory, rel)
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:
            yield WalkEntry(rel or ".", directory, False, f"unreadable directory: {exc.strerror}")
            return
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                yield WalkEntry(child, entry.path, False, f"unreadable entry: {exc.strerror}")
                continue
            if is_dir and entry.name in ALWAYS_SKIP:
                continue
            if is_ignored(rules, child, is_dir or (is_link and os.path.isdir(entry.path))):
                continue
            if is_dir:
                if depth >= self.max_depth:
                    self.depth_limited = True
                    continue
                yield from self._walk(entry.path, child, depth + 1, rules)
            else:
                yield WalkEntry(child, entry.path, is_link)
