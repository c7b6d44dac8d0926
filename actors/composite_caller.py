"""``CompositeCaller``: several ``ToolCaller``s behind one name space.

A handoff names a tool; the composite finds the one member that serves it and forwards the
call. Members say what they serve through ``owns(name)`` (MCP and orchestrator callers),
``names()`` or ``in`` (``SkillRegistry``). A name nobody serves, or that two members serve,
is an error that names the offender and the candidates. Pools follow the owning member:
``pool_options`` delegates to it, so a skill keeps its replicas and CPUs.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from actors.tools import ToolCallResult

__all__ = ["CompositeCaller", "UnknownTool", "AmbiguousTool"]

_DEFAULT_POOL = (4, 0.0)


class UnknownTool(LookupError):
    """Raised when no member of a ``CompositeCaller`` serves the tool name (lists the known ones)."""


class AmbiguousTool(LookupError):
    """Raised when more than one member serves the tool name; give one of them a prefix."""


def _claims(member: Any, name: str) -> bool:
    owns = getattr(member, "owns", None)
    if callable(owns):
        return bool(owns(name))
    if hasattr(member, "__contains__"):
        return name in member
    return name in member.names()


def _label(member: Any, index: int) -> str:
    return getattr(member, "label", None) or f"{type(member).__name__}#{index}"


class CompositeCaller:
    """One ``ToolCaller`` over ``members``; each tool name must belong to exactly one of them."""

    def __init__(self, *members: Any) -> None:
        problems: list[str] = []
        if not members:
            problems.append("give at least one member caller")
        for i, m in enumerate(members):
            if not callable(getattr(m, "call_tool", None)):
                problems.append(f"member {i} ({type(m).__name__}) has no async call_tool(name, arguments)")
            elif not any(callable(getattr(m, attr, None)) for attr in ("owns", "names", "__contains__")):
                problems.append(f"member {i} ({type(m).__name__}) cannot say which tools it serves: give it owns(name) or names()")
        if problems:
            raise TypeError("CompositeCaller: " + "; ".join(problems))
        self.members: tuple[Any, ...] = members
        # Identifies this composite's subagent pools across processes (it travels with pickles).
        self.pool_key = f"composite-{uuid.uuid4().hex[:12]}"

    def __repr__(self) -> str:
        return f"CompositeCaller({', '.join(_label(m, i) for i, m in enumerate(self.members))})"

    def names(self) -> list[str]:
        """Every tool name the members know of now (MCP members after their ``list_tools``)."""
        known: set[str] = set()
        for m in self.members:
            lister = getattr(m, "names", None)
            if callable(lister):
                known.update(lister())
        return sorted(known)

    def owns(self, name: str) -> bool:
        return any(_claims(m, name) for m in self.members)

    def resolve(self, name: str) -> Any:
        """The member serving ``name``; ``UnknownTool`` or ``AmbiguousTool`` otherwise."""
        owners = [(i, m) for i, m in enumerate(self.members) if _claims(m, name)]
        if not owners:
            raise UnknownTool(f"no member serves the tool {name!r}; known tools: {', '.join(self.names()) or 'none'}")
        if len(owners) > 1:
            who = " and ".join(_label(m, i) for i, m in owners)
            raise AmbiguousTool(f"the tool {name!r} is served by {who}; give one of them a prefix so every name has one owner")
        return owners[0][1]

    def interruptible(self, name: str) -> bool:
        """Whether cancelling ``name`` stops its work (asked of the member that serves it)."""
        try:
            member = self.resolve(name)
        except LookupError:
            return True
        probe = getattr(member, "interruptible", None)
        return bool(probe(name)) if callable(probe) else True

    def pool_options(self, name: str) -> tuple[int, float]:
        """``(replicas, num_cpus)`` of the owning member's pool for ``name``."""
        try:
            member = self.resolve(name)
        except LookupError:
            return 1, 0.0  # the call will report the error; no need for a big pool
        options = getattr(member, "pool_options", None)
        return options(name) if callable(options) else _DEFAULT_POOL

    async def list_tools(self) -> list[str]:
        """Ask members that discover their tools (MCP) to list them; return every known name."""
        listers = [m.list_tools() for m in self.members if callable(getattr(m, "list_tools", None))]
        await asyncio.gather(*listers)
        return self.names()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Forward to the owning member; an unknown or ambiguous name is a tool error saying why."""
        try:
            member = self.resolve(name)
        except UnknownTool:
            try:
                await self.list_tools()  # MCP members may not have listed in this process yet
                member = self.resolve(name)
            except LookupError as exc:
                return ToolCallResult.error(str(exc))
        except AmbiguousTool as exc:
            return ToolCallResult.error(str(exc))
        return await member.call_tool(name, arguments)
