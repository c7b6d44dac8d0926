"""The agents the pydantic-ai tests run: a scripted ``FunctionModel`` and two tools.

The model's function runs inside the model subagent's replica: it appends ``model <n>`` to
the ledger (fsynced) for each request it really receives, so a request answered from the
journal leaves no line. It can hold request ``hold_at`` until a release file appears (a
crash test kills the driver while that request is in flight). The ``record`` tool appends
``tool record <note>`` from its body in the driver: a side effect that must happen once.
"""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests._ledger import append_line

#: The tool calls of each response but the last; the last answers with text.
SCRIPT: list[list[tuple[str, dict[str, object]]]] = [
    [("add", {"a": 1, "b": 2}), ("record", {"note": "first"})],
    [("add", {"a": 3, "b": 4})],
    [("record", {"note": "second"}), ("add", {"a": 5, "b": 6})],
]
MODEL_REQUESTS = len(SCRIPT) + 1


def _returns(messages: list[ModelMessage]) -> list[str]:
    return [f"{part.tool_name}={part.content}" for message in messages for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)]


async def scripted(messages: list[ModelMessage], info: AgentInfo, *, ledger: str, hold_at: int | None = None,
                   release: str = "", filler: int = 0) -> ModelResponse:
    n = sum(1 for message in messages if message.kind == "response")
    append_line(ledger, f"model {n}")
    if hold_at is not None and n == hold_at:
        while not os.path.exists(release):  # held until the test releases it (after its kill)
            await asyncio.sleep(0.02)
    if n < len(SCRIPT):
        return ModelResponse(parts=[ToolCallPart(tool, dict(args), tool_call_id=f"call-{n}-{i}")
                                    for i, (tool, args) in enumerate(SCRIPT[n])])
    return ModelResponse(parts=[TextPart("done: " + "; ".join(_returns(messages)) + " " + "x" * filler)])


def build_agent(ledger: Path, *, hold_at: int | None = None, release: Path | None = None, name: str | None = "scribe",
                script: object = None) -> Agent[str, str]:
    """The test agent: deps is the ledger path its side-effect tool appends to."""
    function = functools.partial(scripted if script is None else script, ledger=str(ledger), hold_at=hold_at,
                                 release=str(release or ""))
    agent: Agent[str, str] = Agent(FunctionModel(function), deps_type=str, name=name)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @agent.tool
    def record(ctx: RunContext[str], note: str) -> str:
        """Write a note down (a side effect)."""
        append_line(ctx.deps, f"tool record {note}")
        return f"recorded {note}"

    return agent


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


#: The long conversation's model requests (each response but the last also calls ``add``).
LONG_REQUESTS = 100
#: Characters of text in its responses, in turn (8,000 on average, as answers vary): about
#: 800,000 characters in all, some 200,000 tokens.
LONG_TEXTS = (4_000, 6_000, 8_000, 10_000, 12_000)


async def long_talk(messages: list[ModelMessage], info: AgentInfo, *, ledger: str, **_: object) -> ModelResponse:
    """A long conversation: response n says ``LONG_TEXTS[n % 5]`` characters; all but the last
    also call ``add``."""
    n = sum(1 for message in messages if message.kind == "response")
    append_line(ledger, f"model {n}")
    size = LONG_TEXTS[n % len(LONG_TEXTS)]
    words = " ".join(f"w{n}x{i}" for i in range(size))[:size]
    if n < LONG_REQUESTS - 1:
        return ModelResponse(parts=[TextPart(words), ToolCallPart("add", {"a": n, "b": 1}, tool_call_id=f"call-{n}")])
    return ModelResponse(parts=[TextPart(words)])


def conversation_text(messages: list[ModelMessage]) -> int:
    """Characters of a conversation's own text: prompts, the model's text, tool calls' arguments
    and tool returns, each counted once."""
    total = 0
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                total += len(part.tool_name) + len(part.args_as_json_str())
            elif isinstance(part, ToolReturnPart):
                total += len(part.tool_name) + len(part.model_response_str())
            elif isinstance(getattr(part, "content", None), str):
                total += len(part.content)  # type: ignore[union-attr]  # text, prompt and instruction parts
    return total


async def retry_then_publish(messages: list[ModelMessage], info: AgentInfo, *, ledger: str, **_: object) -> ModelResponse:
    """Calls ``flaky`` until it returns (it asks for a retry once), then ``publish`` (which needs
    approval), then answers with what the tools returned."""
    n = sum(1 for message in messages if message.kind == "response")
    append_line(ledger, f"model {n}")
    returns = _returns(messages)
    if not any(r.startswith("flaky=flaky ok") for r in returns):  # (a retry comes back as a return too)
        return ModelResponse(parts=[ToolCallPart("flaky", {"x": n}, tool_call_id=f"flaky-{n}")])
    if not any(r.startswith("publish=") for r in returns):
        return ModelResponse(parts=[ToolCallPart("publish", {"text": "post"}, tool_call_id="publish-1")])
    return ModelResponse(parts=[TextPart("done: " + "; ".join(returns))])


def build_approval_agent(ledger: Path, *, name: str = "publisher") -> Agent[str, str | DeferredToolRequests]:
    """An agent whose ``flaky`` tool asks for one retry and whose ``publish`` tool needs approval."""
    function = functools.partial(retry_then_publish, ledger=str(ledger))
    agent: Agent[str, str | DeferredToolRequests] = Agent(
        FunctionModel(function), deps_type=str, name=name, output_type=[str, DeferredToolRequests])

    @agent.tool
    def flaky(ctx: RunContext[str], x: int) -> str:
        """Fails the first time it runs."""
        first = not any(line.startswith("tool flaky") for line in ledger_lines(Path(ctx.deps)))
        append_line(ctx.deps, f"tool flaky {x}")
        if first:
            raise ModelRetry("try again")
        return f"flaky ok {x}"

    @agent.tool(requires_approval=True)
    def publish(ctx: RunContext[str], text: str) -> str:
        """Publishes (a side effect a person approves)."""
        append_line(ctx.deps, f"tool publish {text}")
        return f"published {text}"

    return agent


async def held_talk(messages: list[ModelMessage], info: AgentInfo, *, ledger: str, release: str = "",
                    **_: object) -> ModelResponse:
    """Two requests per conversation, each logged ``start``/``end`` with its conversation's
    prompt; every request waits for the release file first (the test saturates the cap)."""
    n = sum(1 for message in messages if message.kind == "response")
    prompt = str(messages[0].parts[0].content)  # type: ignore[union-attr]  # the first request holds the user prompt
    append_line(ledger, f"start {prompt} {n}")
    while not os.path.exists(release):
        await asyncio.sleep(0.02)
    append_line(ledger, f"end {prompt} {n}")
    if n == 0:
        return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 1}, tool_call_id=f"{prompt}-add")])
    return ModelResponse(parts=[TextPart(f"{prompt} done")])


def most_in_flight(lines: list[str]) -> int:
    """The most requests between their ``start`` and ``end`` lines at once, over the ledger."""
    now = peak = 0
    for line in lines:
        now += 1 if line.startswith("start ") else -1 if line.startswith("end ") else 0
        peak = max(peak, now)
    return peak
