"""The one dispatch surface every subagent sits behind: ``ToolCaller``.

The shapes mirror MCP's ``tools/call`` result (a list of text blocks and an ``isError``
flag), so local skills, MCP servers and other orchestrators all answer a handoff the same
way. A caller must pickle: it is shipped into subagent actors and runs there.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TextContent", "ToolCallResult", "ToolCaller"]


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
