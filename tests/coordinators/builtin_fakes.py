"""Pure test helpers for the built-in coordinators: snapshots, a fake tool executor, a run loop.

No Ray and no filesystem: tool outputs are hard-coded dicts shaped like the code skills'.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from coordinators import AgentState, ContextSnapshot, CoordinatorResult, Coordinator, TransitionBatch, reduce, thaw
from coordinators.builtin import DEFAULT_FIRST, call_key

ROOT = "/repo"

Outputs = Callable[[str, dict[str, Any]], tuple[Any, bool]]


def state_with(stage: str = "initial", pending: Sequence[tuple[str, dict[str, Any]]] = (), **conversation: Any) -> AgentState:
    """An `AgentState` with ``root`` set, the given conversation state and pending calls."""
    state = AgentState(conversation_stage=stage, conversation_state={"root": ROOT, **conversation})
    if pending:
        batch = TransitionBatch()
        for tool_name, arguments in pending:
            batch.execute_tool(tool_name, arguments)
        state = reduce(state, batch)
    return state


def snap(state: AgentState) -> ContextSnapshot:
    return ContextSnapshot.of(state)


def planned_calls(result: CoordinatorResult) -> list[tuple[str, dict[str, Any]]]:
    """The (tool_name, arguments) of every ``execute_tool`` in a result."""
    return [
        (t.data["tool_name"], thaw(t.data["arguments"]))
        for t in result.transitions
        if t.transition_type.value == "execute_tool"
    ]


def answer_pending(state: AgentState, outputs: Outputs) -> AgentState:
    """The run loop's executor: answer every pending call with the hard-coded output."""
    batch = TransitionBatch()
    for call in state.pending_tool_calls.values():
        output, is_error = outputs(call.tool_name, thaw(call.arguments))
        batch.tool_result(call.call_id, output, is_error=is_error)
    return state if batch.is_empty() else reduce(state, batch)


async def run_loop(
    state: AgentState, coordinators: Sequence[Coordinator], outputs: Outputs, task: str, max_steps: int = 60
) -> tuple[AgentState, list[tuple[str, CoordinatorResult]]]:
    """The documented loop: run, apply, execute pending calls after safety, follow handoffs."""
    by_name = {c.name: c for c in coordinators}
    current, steps = DEFAULT_FIRST, []
    for _ in range(max_steps):
        result = await by_name[current].process(ContextSnapshot.of(state), task)
        state = reduce(state, result.transitions)
        steps.append((current, result))
        if not result.should_continue:
            break
        if current == "safety":
            state = answer_pending(state, outputs)
        current = result.handoff_to or "coordination"
    return state, steps


def table(responses: dict[str, Any]) -> Outputs:
    """Outputs from a dict keyed by `call_key` (or by tool name alone); unknown calls fail."""
    def outputs(tool_name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        key = call_key(tool_name, arguments)
        if key in responses:
            return responses[key], False
        if tool_name in responses:
            return responses[tool_name], False
        return {"error": f"no canned output for {key}"}, True
    return outputs


def search_output(hits_by_keyword: dict[str, list[dict[str, Any]]], arguments: dict[str, Any]) -> dict[str, Any]:
    """What ``search_code`` would return for the exploration's searches of a keyword: the
    definition search (pattern starting with ``^``) finds only the hits with a symbol kind,
    the whole-word or literal search finds them all."""
    pattern = arguments["pattern"]
    for keyword, hits in hits_by_keyword.items():
        if pattern == keyword or rf"\b{re.escape(keyword)}\b" in pattern or rf"\s+{re.escape(keyword)}\b" in pattern:
            if pattern.startswith("^"):
                hits = [hit for hit in hits if hit.get("symbol_kind")]
            return {"hits": hits, "files_scanned": 3, "truncated": False, "skipped": []}
    return {"hits": [], "files_scanned": 3, "truncated": False, "skipped": []}
