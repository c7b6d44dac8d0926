"""The safety coordinator: checks every pending tool call against rules, from the snapshot only.

It never touches the disk: paths are judged lexically against the run's ``root`` and by
the ``files`` facts that ``list_tree`` recorded (symlinks escaping the root, sizes, binary
files). A blocked call is answered with ``tool_result(call_id, {"blocked": reason},
is_error=True)``, which removes it from the pending calls, and is recorded in ``blocked``.
When a ``"fatal"`` rule fires, the calls still pending are cancelled the same way and the
result has ``should_continue=False``, so a stopped run leaves nothing pending.
Rules are data: `SafetyRule` objects in a tuple, easy to extend or replace.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch
from coordinators import thaw
from coordinators.builtin._common import CODE_TOOLS, append_trail, read_state

__all__ = [
    "DEFAULT_RULES",
    "SafetyContext",
    "SafetyCoordinator",
    "SafetyRule",
    "check_call",
    "MAX_PATTERN_CHARS",
]

MAX_PATTERN_CHARS = 500
_SHELL_METACHARACTERS = re.compile(r"[;&|`$<>\n\r]")
#: A group holding a quantifier, itself quantified: ``(a+)+``, ``(.*x)*``, ``(\w+\s?){2,}``.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*(?:[+*]|\{\d+,\d*\})(?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d+,\d*\})")
_SIZE_ARGUMENTS = ("max_bytes", "max_file_bytes")


@dataclass(frozen=True)
class SafetyContext:
    """What the rules may look at: snapshot data and the coordinator's limits."""

    root: str | None
    files: Mapping[str, Any]
    blocked_total: int  # calls blocked in this run so far, this turn's included
    max_file_bytes: int
    max_blocked: int
    allowed_tools: frozenset[str]


@dataclass(frozen=True)
class SafetyRule:
    """One rule. ``scope="call"`` rules see each pending call, ``"run"`` rules see ``None``.

    ``check`` returns None when fine, else the reason. ``severity="block"`` blocks the call;
    ``"fatal"`` also stops the run (``should_continue=False``).
    """

    name: str
    severity: Literal["block", "fatal"]
    check: Callable[[Any, SafetyContext], str | None]
    scope: Literal["call", "run"] = "call"


def _strings(value: Any, where: str = "") -> list[tuple[str, str]]:
    """Every (argument path, string) inside an argument value."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, Mapping):
        return [pair for key, item in value.items() for pair in _strings(item, f"{where}.{key}".lstrip("."))]
    if isinstance(value, (list, tuple)):
        return [pair for i, item in enumerate(value) for pair in _strings(item, f"{where}[{i}]")]
    return []


_ANCHOR = "/__relative_root__"  # stands in for the cwd when the root is relative (no os call)


def relative_to_root(path: str, root: str) -> str | None:
    """``path`` (absolute, or relative to ``root``) as a normalised relative path ("." for the
    root itself), or None when it is outside ``root``. Purely lexical: no filesystem, no cwd."""
    base = posixpath.normpath(root if posixpath.isabs(root) else posixpath.join(_ANCHOR, root))
    if posixpath.isabs(path) and not posixpath.isabs(root):
        return None
    full = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(base, path))
    if full == base:
        return "."
    prefix = base.rstrip("/") + "/"
    return full[len(prefix):] if full.startswith(prefix) else None


def _check_unknown_tool(call: Any, ctx: SafetyContext) -> str | None:
    if call.tool_name in ctx.allowed_tools:
        return None
    return f"tool {call.tool_name!r} is not allowed (allowed: {', '.join(sorted(ctx.allowed_tools))})"


def _check_root_argument(call: Any, ctx: SafetyContext) -> str | None:
    given = call.arguments.get("root")
    if given is None or ctx.root is None:
        return None
    if not isinstance(given, str) or posixpath.normpath(given) != posixpath.normpath(ctx.root):
        return f"root argument {given!r} is not the run's root {ctx.root!r}"
    return None


def _check_path_outside_root(call: Any, ctx: SafetyContext) -> str | None:
    path = call.arguments.get("path")
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        return f"path argument {path!r} is not a non-empty string"
    if ctx.root is None:
        return f"path {path!r} cannot be checked: the run has no root"
    if relative_to_root(path, ctx.root) is None:
        return f"path {path!r} is outside root {ctx.root!r}"
    return None


def _fact_of(call: Any, ctx: SafetyContext) -> tuple[str, Mapping[str, Any] | None]:
    path = call.arguments.get("path")
    if not isinstance(path, str) or ctx.root is None:
        return "", None
    rel = relative_to_root(path, ctx.root)
    return (rel or ""), (ctx.files.get(rel) if rel else None)


def _check_symlink_escape(call: Any, ctx: SafetyContext) -> str | None:
    rel, _ = _fact_of(call, ctx)
    parts = rel.split("/") if rel and rel != "." else []
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        fact = ctx.files.get(prefix)
        if fact is not None and fact.get("is_symlink") and fact.get("escapes_root"):
            target = fact.get("symlink_target")
            return f"path {call.arguments['path']!r} goes through symlink {prefix!r} to {target!r}, outside the root"
    return None


def _check_file_too_large(call: Any, ctx: SafetyContext) -> str | None:
    rel, fact = _fact_of(call, ctx)
    if fact is not None and fact.get("size", 0) > ctx.max_file_bytes:
        return f"file {rel!r} is {fact['size']} bytes (limit {ctx.max_file_bytes})"
    for name in _SIZE_ARGUMENTS:
        value = call.arguments.get(name)
        if isinstance(value, int) and value > ctx.max_file_bytes:
            return f"argument {name}={value} exceeds the limit of {ctx.max_file_bytes} bytes"
    return None


def _check_binary_file(call: Any, ctx: SafetyContext) -> str | None:
    rel, fact = _fact_of(call, ctx)
    if fact is not None and fact.get("is_binary"):
        return f"file {rel!r} is binary"
    return None


def _check_dangerous_pattern(call: Any, ctx: SafetyContext) -> str | None:
    pattern = call.arguments.get("pattern")
    if not isinstance(pattern, str):
        return None
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"pattern is {len(pattern)} characters (limit {MAX_PATTERN_CHARS})"
    if call.arguments.get("regex") and _NESTED_QUANTIFIER.search(pattern):
        return f"regex {pattern!r} nests quantifiers (catastrophic backtracking)"
    return None


def _check_shell_and_nul(call: Any, ctx: SafetyContext) -> str | None:
    problems = []
    for where, text in _strings(dict(call.arguments)):
        if "\x00" in text:
            problems.append(f"argument {where!r} contains a NUL byte")
        elif where != "pattern" and _SHELL_METACHARACTERS.search(text):
            problems.append(f"argument {where!r} contains shell metacharacters ({text!r})")
    return "; ".join(problems) or None


def _check_root_missing(_: Any, ctx: SafetyContext) -> str | None:
    return None if ctx.root else "the run has no 'root' in its state"


def _check_too_many_blocked(_: Any, ctx: SafetyContext) -> str | None:
    if ctx.blocked_total > ctx.max_blocked:
        return f"{ctx.blocked_total} calls blocked in this run (limit {ctx.max_blocked})"
    return None


#: The built-in rules, in the order their reasons are reported.
DEFAULT_RULES: tuple[SafetyRule, ...] = (
    SafetyRule("unknown_tool", "block", _check_unknown_tool),
    SafetyRule("root_argument", "block", _check_root_argument),
    SafetyRule("path_outside_root", "block", _check_path_outside_root),
    SafetyRule("symlink_escape", "block", _check_symlink_escape),
    SafetyRule("file_too_large", "block", _check_file_too_large),
    SafetyRule("binary_file", "block", _check_binary_file),
    SafetyRule("dangerous_pattern", "block", _check_dangerous_pattern),
    SafetyRule("shell_or_nul", "block", _check_shell_and_nul),
    SafetyRule("root_missing", "fatal", _check_root_missing, scope="run"),
    SafetyRule("too_many_blocked", "fatal", _check_too_many_blocked, scope="run"),
)


def check_call(
    call: Any, ctx: SafetyContext, rules: tuple[SafetyRule, ...] = DEFAULT_RULES
) -> list[tuple[SafetyRule, str]]:
    """Every call-scoped rule that ``call`` (a pending call) breaks, with its reason."""
    broken = []
    for rule in rules:
        reason = rule.check(call, ctx) if rule.scope == "call" else None
        if reason:
            broken.append((rule, reason))
    return broken


class SafetyCoordinator:
    """Blocks unsafe pending tool calls and stops the run when a fatal rule fires."""

    name = "safety"

    def __init__(
        self,
        rules: tuple[SafetyRule, ...] = DEFAULT_RULES,
        *,
        max_file_bytes: int = 1_000_000,
        max_blocked: int = 10,
        allowed_tools: tuple[str, ...] = CODE_TOOLS,
    ) -> None:
        self.rules = tuple(rules)
        self.max_file_bytes = max_file_bytes
        self.max_blocked = max_blocked
        self.allowed_tools = frozenset(allowed_tools)

    def _context(self, snapshot: ContextSnapshot, blocked_total: int) -> SafetyContext:
        root = snapshot.get_state("root")
        files = snapshot.get_state("files")
        return SafetyContext(
            root=root if isinstance(root, str) and root else None,
            files=files if isinstance(files, Mapping) else {},
            blocked_total=blocked_total,
            max_file_bytes=self.max_file_bytes,
            max_blocked=self.max_blocked,
            allowed_tools=self.allowed_tools,
        )

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        """Check every pending call; block the unsafe ones; stop on a fatal rule."""
        blocked = read_state(snapshot, "blocked", [])
        before = len(blocked)
        ctx = self._context(snapshot, before)
        batch = TransitionBatch()
        fatal: list[str] = []
        calls = sorted(snapshot.pending_tool_calls.values(), key=lambda call: call.call_id)
        for call in calls:
            broken = check_call(call, ctx, self.rules)
            if not broken:
                continue
            reason = "; ".join(f"{rule.name}: {why}" for rule, why in broken)
            fatal += [f"{rule.name}: {why}" for rule, why in broken if rule.severity == "fatal"]
            batch.tool_result(call.call_id, {"blocked": reason}, is_error=True)
            blocked.append({
                "call_id": call.call_id, "tool_name": call.tool_name,
                "arguments": thaw(call.arguments), "reason": reason,
            })
        if calls:
            ctx = self._context(snapshot, len(blocked))
            for rule in self.rules:
                why = rule.check(None, ctx) if rule.scope == "run" else None
                if why:
                    fatal.append(f"{rule.name}: {why}")
        if fatal:  # leave nothing pending for a loop that is about to stop
            answered = {entry["call_id"] for entry in blocked[before:]}
            for call in calls:
                if call.call_id not in answered:
                    reason = "cancelled: the run is stopping"
                    batch.tool_result(call.call_id, {"blocked": reason}, is_error=True)
                    blocked.append({
                        "call_id": call.call_id, "tool_name": call.tool_name,
                        "arguments": thaw(call.arguments), "reason": reason,
                    })
        newly = blocked[before:]
        if newly:
            batch.update_state("blocked", blocked)
        reasoning = f"checked {len(calls)} pending call(s), blocked {len(newly)}"
        if newly:
            reasoning += ": " + "; ".join(entry["reason"] for entry in newly)
        if fatal:
            reasoning = f"stopping the run: {'; '.join(fatal)} ({reasoning})"
        append_trail(batch, snapshot, self.name, reasoning)
        return CoordinatorResult(
            transitions=batch,
            reasoning=reasoning,
            should_continue=not fatal,
            handoff_to=None if fatal else "coordination",
        )
