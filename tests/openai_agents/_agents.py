"""The agents and server scripts of the OpenAI Agents SDK tests.

The agents are plain SDK agents whose model is ``test-model`` on the test's counting server
(``chat_model``, the model factory each model subagent calls, or the same model for a plain
``Runner.run``). ``record`` and ``publish`` append a line to the ledger (the run's context,
a path) from their bodies, fsynced: side effects that must happen once.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, RunContextWrapper, function_tool
from openai import AsyncOpenAI

from tests._ledger import append_line

MODEL = "test-model"
#: No traces leave the test machine.
QUIET = RunConfig(tracing_disabled=True)

#: The tool calls of each response but the last (which answers with the tools' outputs).
SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [("add", {"a": 1, "b": 2}), ("record", {"note": "first"})],
    [("add", {"a": 3, "b": 4})],
    [("record", {"note": "second"}), ("add", {"a": 5, "b": 6})],
]
MODEL_REQUESTS = len(SCRIPT) + 1


def _tool_outputs(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


def _system(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")


def script(label: str, step: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the server answers: by the conversation's label, the script its name says."""
    if label.startswith("handoff"):
        if "triage" in _system(messages):
            return {"tool_calls": [(f"{label}-h", "transfer_to_specialist", {})]}
        if step == 1:
            return {"tool_calls": [(f"{label}-add", "add", {"a": 20, "b": 22})]}
        return {"content": "specialist: " + _tool_outputs(messages)[-1]}
    if label.startswith("approve"):
        if step == 0:
            return {"tool_calls": [(f"{label}-publish", "publish", {"text": "post"})]}
        return {"content": "done: " + "; ".join(_tool_outputs(messages))}
    if label.startswith("typed"):
        return {"content": json.dumps({"city": "Lyon", "degrees": 21})}
    if label.startswith("long"):
        return long_talk(step)
    if label.startswith("short"):  # two requests: a tool call, then the answer
        if step == 0:
            return {"tool_calls": [(f"{label}-add", "add", {"a": 1, "b": 1})]}
        return {"content": f"{label} done"}
    if step < len(SCRIPT):
        return {"tool_calls": [(f"call-{step}-{i}", tool, args) for i, (tool, args) in enumerate(SCRIPT[step])]}
    return {"content": "done: " + "; ".join(_tool_outputs(messages))}


#: The long conversation's model requests (each response but the last also calls ``add``).
LONG_REQUESTS = 100
#: Characters of text in its responses, in turn (8,000 on average): about 800,000 characters
#: in all, some 200,000 tokens.
LONG_TEXTS = (4_000, 6_000, 8_000, 10_000, 12_000)


def long_talk(step: int) -> dict[str, Any]:
    """Response ``step`` of the long conversation: ``LONG_TEXTS[step % 5]`` characters of text,
    and a call of ``add`` in all but the last."""
    size = LONG_TEXTS[step % len(LONG_TEXTS)]
    words = " ".join(f"w{step}x{i}" for i in range(size))[:size]
    if step < LONG_REQUESTS - 1:
        return {"content": words, "tool_calls": [(f"call-{step}", "add", {"a": step, "b": 1})]}
    return {"content": words}


def conversation_text(items: list[Any]) -> int:
    """Characters of a conversation's own text (``RunResult.to_input_list()``): the prompt, the
    model's text, tool calls' names and arguments and tool outputs, each counted once."""
    total = 0
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            total += len(item["name"]) + len(item["arguments"])
        elif kind == "function_call_output":
            total += len(str(item["output"]))
        elif isinstance(item.get("content"), str):
            total += len(item["content"])
        elif isinstance(item.get("content"), list):
            total += sum(len(part.get("text", "")) for part in item["content"])
    return total


def chat_model(base_url: str, name: str | None) -> OpenAIChatCompletionsModel:
    """The SDK's chat-completions model on the test server (no retries: each request the
    server counts is one the runtime sent)."""
    client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    return OpenAIChatCompletionsModel(model=name or MODEL, openai_client=client)


def factory(base_url: str) -> functools.partial[OpenAIChatCompletionsModel]:
    """A picklable model factory for ``SoloistRunner(model_factory=...)``."""
    return functools.partial(chat_model, base_url)


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def record(ctx: RunContextWrapper[str], note: str) -> str:
    """Write a note down (a side effect)."""
    append_line(ctx.context, f"tool record {note}")
    return f"recorded {note}"


@function_tool(needs_approval=True)
def publish(ctx: RunContextWrapper[str], text: str) -> str:
    """Publish (a side effect a person approves)."""
    append_line(ctx.context, f"tool publish {text}")
    return f"published {text}"


def scribe(model: Any = MODEL) -> Agent[str]:
    """An agent with two tools; ``model`` a name (durable runs) or a model (plain runs)."""
    return Agent(name="scribe", instructions="You are a scribe.", model=model, tools=[add, record])


def triage_and_specialist(model: Any = MODEL) -> tuple[Agent[str], Agent[str]]:
    specialist: Agent[str] = Agent(name="specialist", instructions="You are the specialist.", model=model, tools=[add])
    triage: Agent[str] = Agent(name="triage", instructions="You are triage.", model=model, handoffs=[specialist])
    return triage, specialist


def publisher(model: Any = MODEL) -> Agent[str]:
    return Agent(name="publisher", instructions="You publish.", model=model, tools=[publish])


def ledger_lines(path: Any) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def output_line(output: Any) -> str:
    return f"OUTPUT {json.dumps(output)}"
