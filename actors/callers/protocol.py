"""The one dispatch surface every subagent sits behind: ``ToolCaller``.

The shapes mirror MCP's ``tools/call`` result (a list of text blocks and an ``isError``
flag), so local skills, MCP servers and other orchestrators all answer a handoff the same
way. A caller must pickle: it is shipped into subagent actors and runs there.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from actors.callers.policy import PoolPolicy, ReplicaResources

__all__ = [
    "TextContent", "ToolCallResult", "ToolCaller", "PooledCaller", "DiscoversTools", "Interruptible", "RetiringPools",
    "ScalingPools", "SharedPools",
    "DEFAULT_POOL", "DEFAULT_RETIRE_AFTER_S",
]

DEFAULT_POOL: tuple[int, float] = (4, 0.0)
"""``(replicas, num_cpus)`` of the subagent pool of a caller that is not a ``PooledCaller``."""

DEFAULT_RETIRE_AFTER_S: float = 5.0
"""How long a subagent replica stays up with nothing to do before it ends itself (unless its
caller is ``RetiringPools`` and says otherwise). Long enough that a run loop's next turn
finds it warm; short enough that a driver opening a run per request keeps no process per
closed run. A call that reaches a retiring replica is sent to a new one, never lost."""


class TextContent(BaseModel):
    """One text block of a tool's answer."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ToolCallResult(BaseModel):
    """What a tool returned: text blocks (JSON, for typed handoffs) and whether it failed."""

    model_config = ConfigDict(frozen=True)

    content: list[TextContent] = Field(default_factory=list)
    is_error: bool = False

    @classmethod
    def of_json(cls, value: Any) -> "ToolCallResult":
        """A successful result carrying ``value`` as JSON (pydantic models dumped in JSON mode)."""
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        else:
            text = json.dumps(value)
        return cls(content=[TextContent(text=text)])

    @classmethod
    def error(cls, message: str) -> "ToolCallResult":
        """A tool-reported failure with a message for the caller."""
        return cls(content=[TextContent(text=message)], is_error=True)

    @property
    def text(self) -> str:
        """All text blocks joined: the JSON a typed handoff decodes."""
        return "".join(block.text for block in self.content)


@runtime_checkable
class ToolCaller(Protocol):
    """Anything that can run a named tool with JSON arguments.

    Implementations must pickle (they run inside subagent actors on the cluster) and must
    report tool-level failures as ``ToolCallResult(is_error=True)``; an exception means the
    caller itself failed (transport, crash) and is reported as such.
    """

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult: ...


@runtime_checkable
class PooledCaller(ToolCaller, Protocol):
    """A ``ToolCaller`` that names and sizes its own subagent pools and says which tools it serves.

    Every caller soloist ships implements it (``SkillRegistry``, ``CompositeCaller``,
    ``OrchestratorCaller``, ``McpToolCaller``, ``LlmCaller``). A plain ``ToolCaller`` still
    works: its pools are keyed by a digest of its pickle and sized ``DEFAULT_POOL``, and a
    ``CompositeCaller`` asks it ``name in caller``.
    """

    @property
    def pool_key(self) -> str:
        """Identifies this caller's subagent pools in every process (it travels with pickles)."""
        ...

    @property
    def label(self) -> str:
        """A short human name for messages (``"nested run 'inner'"``), or ``""`` when the caller has
        none (a ``CompositeCaller`` then names it by type and position)."""
        ...

    def pool_options(self, name: str) -> tuple[int, float]:
        """``(replicas, num_cpus)`` of the subagent pool that serves tool ``name``."""
        ...

    def owns(self, name: str) -> bool:
        """Whether this caller serves tool ``name``."""
        ...

    def names(self) -> list[str]:
        """The tool names known to be served now (may grow, e.g. after an MCP ``list_tools``)."""
        ...


@runtime_checkable
class DiscoversTools(Protocol):
    """A caller that learns its tool names from elsewhere (an MCP server's ``tools/list``)."""

    async def list_tools(self) -> list[Any]:
        """Ask for the tools now (what is returned depends on the caller); afterwards ``names()``/``owns()`` know them."""
        ...


@runtime_checkable
class Interruptible(Protocol):
    """A caller some of whose tools cannot be stopped once started (a skill run in a thread).

    Cancelling or timing out such a tool leaves its body running to its end; its subagent
    keeps the body's permit until then and the timeout error says so. A caller that does
    not implement this protocol is taken to stop every tool it is asked to cancel.
    """

    def interruptible(self, name: str) -> bool:
        """Whether cancelling a call of tool ``name`` stops its body."""
        ...


@runtime_checkable
class RetiringPools(Protocol):
    """A caller that sets how long its idle subagent replicas stay up (``SkillRegistry``)."""

    @property
    def retire_after_s(self) -> float:
        """Seconds a replica of this caller's pools stays up with nothing to do, then retires."""
        ...


@runtime_checkable
class ScalingPools(Protocol):
    """A caller that gives each tool's pool a ``PoolPolicy`` and what its replicas reserve
    (``SkillRegistry``, ``CompositeCaller``). Any other caller's pool grows up to its
    ``pool_options`` replicas, one call each, and shrinks to none when idle."""

    def pool_policy(self, name: str) -> PoolPolicy:
        """How the pool that serves tool ``name`` grows and shrinks."""
        ...

    def replica_resources(self, name: str) -> ReplicaResources:
        """What each replica of that pool reserves on its node."""
        ...


@runtime_checkable
class SharedPools(Protocol):
    """A caller whose tools may share subagent pools (``McpToolCaller``: every tool of one MCP
    server goes to one pool, so each replica holds one session, one server process, per
    server, not one per tool). The pool's policy and resources are those of the tool whose
    call created it. Any other caller has a pool per tool."""

    def pool_group(self, name: str) -> str:
        """The name of the pool that serves tool ``name`` (``name`` itself: a pool of its own)."""
        ...
