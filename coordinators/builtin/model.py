"""The optional model step of ``soloist run --provider openai-compatible``.

Pure coordinators that keep the built-ins untouched: the model is reached only through
``execute_tool`` requests for the ``LlmCaller``'s tools, which the run loop vets (safety)
and runs as handoffs; the coordinators merge the answers back with transitions.

* ``LlmClassificationCoordinator`` (named "classification") writes the rule-based ``task``
  at once and asks ``llm.classify``; on its next turn it merges the model's type,
  complexity and keywords into ``task`` (``classified_by: "llm"``), or keeps the rules'
  answer and says why, and hands off to exploration.
* ``LlmCoordinationCoordinator`` (named "coordination") wraps the built-in coordination;
  when it writes the summary, the run asks ``llm.summarise`` before completing, then adds
  the model's text as ``summary["narrative"]``.
"""

from __future__ import annotations

import json
from typing import Any

from coordinators import (
    ContextSnapshot,
    CoordinatorResult,
    TransitionBatch,
    TransitionType,
    thaw,
)
from coordinators.builtin import (
    CODE_TOOLS,
    DEFAULT_RULES,
    CoordinationCoordinator,
    ExplorationCoordinator,
    SafetyCoordinator,
    SafetyRule,
    classify,
)
from coordinators.builtin._common import append_trail, message_text, read_state

__all__ = ["LlmClassificationCoordinator", "LlmCoordinationCoordinator", "llm_coordinators", "LLM_TOOLS"]

LLM_TOOLS = ("llm.classify", "llm.summarise")
_CLASSIFY_ID, _SUMMARY_ID = "llm-classify", "llm-summarise"


def _answer(snapshot: ContextSnapshot, call_id: str) -> tuple[Any, bool] | None:
    """``(output, is_error)`` of the tool message answering ``call_id``, if any."""
    for message in snapshot.messages:
        if message.role == "tool" and message.tool_call_id == call_id:
            try:
                output = json.loads(message.content)
            except ValueError:
                output = message.content
            return output, bool(message.metadata.get("is_error"))
    return None


class LlmClassificationCoordinator:
    """Classification by the model, with the rule-based one as the floor."""

    name = "classification"

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        text = message_text(message)
        answer = _answer(snapshot, _CLASSIFY_ID)
        batch = TransitionBatch()
        if answer is None and not read_state(snapshot, "llm_classify_requested", False):
            reasoning = "asked the model to classify the task (rule-based classification stands meanwhile)"
            batch.update_state("task", classify(text)).update_state("llm_classify_requested", True)
            batch.execute_tool("llm.classify", {"task": text}, call_id=_CLASSIFY_ID)
            append_trail(batch, snapshot, self.name, reasoning)
            return CoordinatorResult(transitions=batch, reasoning=reasoning, handoff_to=self.name)
        task = read_state(snapshot, "task", None) or classify(text)
        output, is_error = answer if answer is not None else ({"error": "no answer"}, True)
        if is_error or not isinstance(output, dict):
            reasoning = f"kept the rule-based classification: the model's answer was unusable ({str(output)[:200]})"
        else:
            keywords = list(dict.fromkeys([*output["keywords"], *task["keywords"]]))[:8]
            task = {**task, "type": output["type"], "complexity": output["complexity"], "keywords": keywords,
                    "classified_by": "llm", "usage": output.get("usage", {})}
            reasoning = f"the model classified the task as {task['type']} ({task['complexity']}); keywords: {', '.join(keywords)}"
        batch.update_state("task", task).update_stage("exploring")
        append_trail(batch, snapshot, self.name, reasoning)
        return CoordinatorResult(transitions=batch, reasoning=reasoning, handoff_to="exploration")


class LlmCoordinationCoordinator:
    """The built-in coordination, with a model-written narrative added to the summary."""

    name = "coordination"

    def __init__(self) -> None:
        self._inner = CoordinationCoordinator()

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        if snapshot.conversation_stage != "summarising":
            return await self._inner.process(snapshot, message)
        answer = _answer(snapshot, _SUMMARY_ID)
        if answer is None:
            return await self._ask(snapshot, message)
        output, is_error = answer
        summary = read_state(snapshot, "summary", {})
        batch = TransitionBatch()
        if is_error or not isinstance(output, dict):
            reasoning = f"summary complete without a narrative: the model's answer was unusable ({str(output)[:200]})"
        else:
            summary = {**summary, "narrative": output["text"], "llm_usage": output.get("usage", {})}
            reasoning = "the model wrote the summary's narrative; run complete"
        batch.update_state("summary", summary).update_stage("complete")
        append_trail(batch, snapshot, self.name, reasoning)
        return CoordinatorResult(transitions=batch, reasoning=reasoning, should_continue=False)

    async def _ask(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        """Keep the built-in summary, hold back "complete", and ask the model for a narrative."""
        inner = await self._inner.process(snapshot, message)
        batch = TransitionBatch()
        summary: Any = None
        for t in inner.transitions:
            if t.transition_type == TransitionType.UPDATE_STAGE and t.data["stage"] == "complete":
                continue
            if t.transition_type == TransitionType.UPDATE_STATE and t.data["key"] == "summary":
                summary = t.data["value"]
            batch.add(t)
        if summary is None:  # nothing to narrate: the built-in decision stands
            return inner
        batch.execute_tool("llm.summarise", {"task": message_text(message), "summary": thaw(summary)}, call_id=_SUMMARY_ID)
        reasoning = "summary written; asked the model for a narrative"
        return CoordinatorResult(transitions=batch, reasoning=reasoning, handoff_to=self.name)


def _for_code_tools_only(rule: SafetyRule) -> SafetyRule:
    """``rule``, applied to code-tool calls only: model calls carry prose, not paths or shell."""

    def check(call: Any, ctx: Any) -> str | None:
        if call is not None and call.tool_name in LLM_TOOLS:
            return None
        return rule.check(call, ctx)

    return SafetyRule(rule.name, rule.severity, check, scope=rule.scope)


def llm_coordinators() -> tuple[Any, ...]:
    """The four coordinators of a run with a model: classification and coordination via the model."""
    rules = tuple(r if r.name == "unknown_tool" or r.scope != "call" else _for_code_tools_only(r) for r in DEFAULT_RULES)
    return (
        LlmClassificationCoordinator(),
        ExplorationCoordinator(),
        SafetyCoordinator(rules, allowed_tools=CODE_TOOLS + LLM_TOOLS),
        LlmCoordinationCoordinator(),
    )

