"""``CompositeCaller``: several ``ToolCaller``s behind one name space.

A handoff names a tool; the composite finds the one member that serves it and forwards the
call. Members say what they serve through ``owns(name)`` (MCP and orchestrator callers),
``names()`` or ``in`` (``SkillRegistry``). A name nobody serves, or that two members serve,
is an error that names the offender and the candidates. Pools follow the owning member:
``pool_options`` and ``pool_group`` delegate to it, so a skill keeps its replicas and CPUs,
and an MCP server's tools keep sharing one pool.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Container
from typing import Any

from actors.callers.policy import PoolPolicy, ReplicaResources
from actors.callers.protocol import (
    DEFAULT_POOL,
    DEFAULT_RETIRE_AFTER_S,
    RetiringPools,
    ScalingPools,
    SharedPools,
    DiscoversTools,
    Interruptible,
    PooledCaller,
    ToolCaller,
    ToolCallResult,
)
from actors.exceptions import AmbiguousTool, UnknownTool

__all__ = ["CompositeCaller"]

def _claims(member: ToolCaller, name: str) -> bool:
    if isinstance(member, PooledCaller):
        return member.owns(name)
    return name in member  # type: ignore[operator]  # a Container, checked in __init__


def _label(member: ToolCaller, index: int) -> str:
    label = member.label if isinstance(member, PooledCaller) else ""
    return label or f"{type(member).__name__}#{index}"


class CompositeCaller:
    """One ``ToolCaller`` over ``members``; each tool name must belong to exactly one of them."""

    def __init__(self, *members: ToolCaller) -> None:
        problems: list[str] = []
        if not members:
            problems.append("give at least one member caller")
        for i, m in enumerate(members):
            if not isinstance(m, ToolCaller):
                problems.append(f"member {i} ({type(m).__name__}) has no async call_tool(name, arguments)")
            elif not isinstance(m, (PooledCaller, Container)):
                problems.append(f"member {i} ({type(m).__name__}) cannot say which tools it serves: implement "
                                "PooledCaller (owns, names, pool_options, pool_key, label) or __contains__")
        if problems:
            raise TypeError("CompositeCaller: " + "; ".join(problems))
        self.members: tuple[ToolCaller, ...] = members
        # Identifies this composite's subagent pools across processes (it travels with pickles).
        self.pool_key = f"composite-{uuid.uuid4().hex[:12]}"
        # The positions of the members that group their tools' pools (``SharedPools``), found
        # on the first ``pool_group`` (None until then, and in a composite pickled before it).
        self._sharing: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        return f"CompositeCaller({', '.join(_label(m, i) for i, m in enumerate(self.members))})"

    def names(self) -> list[str]:
        """Every tool name the members know of now (MCP members after their ``list_tools``)."""
        known: set[str] = set()
        for m in self.members:
            if isinstance(m, PooledCaller):
                known.update(m.names())
        return sorted(known)

    def owns(self, name: str) -> bool:
        return any(_claims(m, name) for m in self.members)

    @property
    def label(self) -> str:
        return f"composite of {', '.join(_label(m, i) for i, m in enumerate(self.members))}"

    def resolve(self, name: str) -> ToolCaller:
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
            return True  # the call fails at once: nothing runs
        return member.interruptible(name) if isinstance(member, Interruptible) else True

    def pool_options(self, name: str) -> tuple[int, float]:
        """``(replicas, num_cpus)`` of the owning member's pool for ``name``."""
        try:
            member = self.resolve(name)
        except LookupError:
            return 1, 0.0  # the call will report the error; no need for a big pool
        return member.pool_options(name) if isinstance(member, PooledCaller) else DEFAULT_POOL

    def pool_group(self, name: str) -> str:
        """The pool of ``name``: its owning member's group when that member groups its tools
        (``SharedPools``: an MCP server's tools share one pool), tagged with the member's
        position so two members' groups stay apart; else a pool of its own (``name``)."""
        sharing = self.__dict__.get("_sharing")
        if sharing is None:  # once per composite object: protocol checks are slow
            sharing = self._sharing = tuple(i for i, m in enumerate(self.members)
                                            if isinstance(m, PooledCaller) and isinstance(m, SharedPools))
        for i in sharing:
            member = self.members[i]
            if member.owns(name):  # type: ignore[attr-defined]
                return f"{i}:{member.pool_group(name)}"  # type: ignore[attr-defined]
        return name

    def pool_policy(self, name: str) -> PoolPolicy:
        """The owning member's ``PoolPolicy`` for ``name`` (its pool's options otherwise)."""
        try:
            member = self.resolve(name)
        except LookupError:
            return PoolPolicy.up_to(1, retire_after_s=DEFAULT_RETIRE_AFTER_S)
        if isinstance(member, PooledCaller) and isinstance(member, ScalingPools):  # PooledCaller first: see pools
            return member.pool_policy(name)
        grace = member.retire_after_s if isinstance(member, RetiringPools) else DEFAULT_RETIRE_AFTER_S
        return PoolPolicy.up_to(self.pool_options(name)[0], retire_after_s=grace)

    def replica_resources(self, name: str) -> ReplicaResources:
        """What the owning member's replicas for ``name`` reserve."""
        try:
            member = self.resolve(name)
        except LookupError:
            return ReplicaResources()
        return member.replica_resources(name) if isinstance(member, PooledCaller) and isinstance(member, ScalingPools) else \
            ReplicaResources(num_cpus=self.pool_options(name)[1])

    async def list_tools(self) -> list[str]:
        """Ask members that discover their tools (MCP) to list them; return every known name."""
        listers = [m.list_tools() for m in self.members if isinstance(m, DiscoversTools)]
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
