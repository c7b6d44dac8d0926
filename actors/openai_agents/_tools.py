"""Function-tool calls as journalled steps: each call's outcome committed before the agent
goes on.

``journalled(tool)`` is the user's ``FunctionTool`` with its ``on_invoke_tool`` wrapped (the
SDK's own guardrails, approval and timeout settings kept): inside a durable run a call is
step ``tool:<n>:<tool call id>``, answered from the journal when its outcome was committed
(the body does not run again), else run in place, in the driver, and its outcome committed.
What is committed is what the SDK makes of the value: a string, number, boolean or None as
it is, a structured output (``ToolOutputText``, ``ToolOutputImage``...) as its model, and
anything else as the text the model is sent (``str(value)``). An exception escaping the tool
(one whose ``failure_error_function`` is None) commits nothing and fails the run, as it
would without soloist; a failure the SDK turns into a message for the model is an outcome.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents.items import ValidToolOutputPydanticModels, ValidToolOutputPydanticModelsTypeAdapter
from agents.tool import FunctionTool, ToolOutputFileContent, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext
from pydantic import TypeAdapter

from actors.agents._durable_errors import JournalMismatch
from actors.agents._steps import StepRecord, current_steps

__all__ = ["journalled"]

_STRUCTURED = (ToolOutputText, ToolOutputImage, ToolOutputFileContent)
_STRUCTURED_LIST: TypeAdapter[list[ValidToolOutputPydanticModels]] = TypeAdapter(list[ValidToolOutputPydanticModels])


def _encode(value: Any) -> dict[str, Any]:
    """The outcome the journal keeps: what the SDK will read of ``value``, as JSON."""
    if value is None or isinstance(value, str | bool | int | float):
        return {"return": value}
    if isinstance(value, _STRUCTURED):
        return {"structured": ValidToolOutputPydanticModelsTypeAdapter.dump_python(value, mode="json")}
    if isinstance(value, list) and value and all(isinstance(item, _STRUCTURED) for item in value):
        return {"structured_list": _STRUCTURED_LIST.dump_python(value, mode="json")}
    return {"text": str(value)}  # what the SDK sends the model for any other value


def _decode(data: dict[str, Any]) -> Any:
    if "return" in data:
        return data["return"]
    if "structured" in data:
        return ValidToolOutputPydanticModelsTypeAdapter.validate_python(data["structured"])
    if "structured_list" in data:
        return _STRUCTURED_LIST.validate_python(data["structured_list"])
    return data["text"]


def journalled(tool: FunctionTool) -> FunctionTool:
    """``tool`` whose calls are journalled steps inside a ``SoloistRunner`` run."""
    invoke = tool.on_invoke_tool
    name = tool.name

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        steps = current_steps()
        if steps is None:
            return await invoke(ctx, arguments)
        key = steps.tool_key(ctx.tool_call_id)
        recorded = steps.recorded(key)
        if recorded is not None:
            if recorded.name != name:
                raise JournalMismatch(
                    f"step {key!r} of run {steps.run_key!r} was committed as a call of tool {recorded.name!r}, "
                    f"but the resumed agent calls {name!r}: the agent or its input changed; start a new run id")
            return _decode(recorded.data)
        value = await invoke(ctx, arguments)
        await steps.commit(StepRecord(key=key, kind="tool", name=name, data=_encode(value)))
        return value

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
