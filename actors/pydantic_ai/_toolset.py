"""Tool calls as journalled steps: each call's outcome committed before the agent goes on.

``JournalledToolset`` wraps each leaf toolset of the agent (its function tools, MCP
servers...). Inside a durable run a call is step ``tool:<n>:<tool call id>``: answered from
the journal when its outcome was committed (the body does not run again), else run in place
and its outcome committed: a return value, or the control-flow signals pydantic-ai tools
raise (``ModelRetry``, ``ApprovalRequired``, ``CallDeferred``), which are raised again when
the step is replayed. An exception of another kind is not an outcome: nothing is committed
and the run fails, as it would without soloist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.messages import ToolReturn
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_core import PydanticSerializationError, to_jsonable_python

from actors.agents._steps import StepRecord, current_steps
from actors.pydantic_ai.exceptions import JournalMismatch, StepNotJournalable

__all__ = ["JournalledToolset", "journalled"]

_TOOL_RETURN = TypeAdapter(ToolReturn)


def _encode(tool: str, result: Any) -> dict[str, Any]:
    try:
        if isinstance(result, ToolReturn):
            return {"tool_return": _TOOL_RETURN.dump_python(result, mode="json")}
        return {"return": to_jsonable_python(result)}
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise StepNotJournalable(
            f"tool {tool!r} returned a {type(result).__name__} that cannot be journalled as JSON ({exc}); "
            "return a JSON-able value (a pydantic model, a dataclass, a dict, a str...)") from exc


def _decode(data: dict[str, Any]) -> Any:
    """The committed outcome again: the value returned, or the signal raised."""
    if "return" in data:
        return data["return"]
    if "tool_return" in data:
        return _TOOL_RETURN.validate_python(data["tool_return"])
    if "retry" in data:
        raise ModelRetry(data["retry"])
    if "approval_required" in data:
        raise ApprovalRequired(metadata=data["approval_required"])
    if "deferred" in data:
        raise CallDeferred(metadata=data["deferred"])
    raise JournalMismatch(f"a committed tool step holds an outcome this version cannot read: {sorted(data)}")


@dataclass
class JournalledToolset(WrapperToolset[AgentDepsT]):
    """A leaf toolset whose calls are journalled steps inside a durable run."""

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT],
                        tool: ToolsetTool[AgentDepsT]) -> Any:
        steps = current_steps()
        if steps is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        key = steps.tool_key(ctx.tool_call_id or name)
        recorded = steps.recorded(key)
        if recorded is not None:
            if recorded.name != name:
                raise JournalMismatch(
                    f"step {key!r} of run {steps.run_key!r} was committed as a call of tool {recorded.name!r}, "
                    f"but the resumed agent calls {name!r}: the agent or its input changed; start a new run id")
            return _decode(recorded.data)
        try:
            result = await super().call_tool(name, tool_args, ctx, tool)
        except ModelRetry as exc:
            await steps.commit(StepRecord(key=key, kind="tool", name=name, data={"retry": exc.message}))
            raise
        except ApprovalRequired as exc:
            await steps.commit(StepRecord(key=key, kind="tool", name=name, data={"approval_required": exc.metadata}))
            raise
        except CallDeferred as exc:
            await steps.commit(StepRecord(key=key, kind="tool", name=name, data={"deferred": exc.metadata}))
            raise
        await steps.commit(StepRecord(key=key, kind="tool", name=name, data=_encode(name, result)))
        return result


def journalled(toolset: AbstractToolset[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
    """``toolset`` with every leaf toolset's calls journalled (for ``visit_and_replace``)."""
    return JournalledToolset(toolset)
