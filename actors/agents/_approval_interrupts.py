"""Tool calls waiting for approval as interrupts of the run, shared by the agent adapters.

An agent run that stops on tool calls a person must approve (pydantic-ai's deferred tools,
the OpenAI Agents SDK's ``needs_approval``) opens one interrupt per call in its run's record
(``actors.interrupts``): the run waits durably, and ``soloist approve``, the runs page or
``answer_interrupt`` answer it from any process. ``approval_answers`` reads the answers
back, by tool call id, for the adapter to give its framework in the framework's own terms.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict

from actors.agents._steps import AgentJournal
from actors.interrupts import RUN_RECORD_KEY, Interrupt, RunRecord, read_record
from actors.orchestrator.facade import Orchestrator

__all__ = ["ApprovalAnswer", "approval_answers", "approval_question", "open_approvals"]


class ApprovalAnswer(BaseModel):
    """A person's answer to one tool call: approved, or rejected with their reason."""

    model_config = ConfigDict(frozen=True)

    approved: bool
    reason: str | None = None


def approval_question(agent: str, run_id: str, tool: str, args: Any, tool_call_id: str) -> dict[str, Any]:
    """What the interrupt asks (JSON): the agent, the run id, the tool, its arguments, the call id."""
    return {"agent": agent, "run_id": run_id, "tool": tool, "args": args, "tool_call_id": tool_call_id}


@dataclasses.dataclass(frozen=True)
class _OpenApprovals:
    """The write that opens an interrupt per call (module level: it travels to the run's actor)."""

    run: str
    agent: str
    run_id: str
    calls: tuple[dict[str, Any], ...]
    version: int

    def __call__(self, state: AgentJournal) -> None:
        record = read_record(state) or RunRecord()
        asked = {i.question.get("tool_call_id") for i in record.interrupts.values()
                 if isinstance(i.question, dict) and i.question.get("run_id") == self.run_id}
        interrupts = dict(record.interrupts)
        opened = record.opened
        for call in self.calls:
            if call["tool_call_id"] in asked:
                continue
            opened += 1
            interrupt_id = f"{self.run}/i{opened}"
            interrupts[interrupt_id] = Interrupt(
                id=interrupt_id, kind="turn", question=call, coordinator=self.agent, turn=0,
                opened_version=self.version, held={"transitions": [], "next": "", "phase": "turn", "on_reject": ""})
        updated = record.model_copy(update={"status": "waiting", "interrupts": interrupts, "opened": opened,
                                            "reason": f"agent {self.agent!r} waits for approval of {len(self.calls)} tool call(s)"})
        state.conversation_state[RUN_RECORD_KEY] = updated.model_dump(mode="json")


async def open_approvals(orch: Orchestrator[Any], agent: str, run_id: str, calls: tuple[dict[str, Any], ...]) -> None:
    """Open an interrupt for each of ``calls`` (``approval_question``s) not asked yet: a
    replayed run writes nothing new. ``agent`` names who asks (the interrupt's coordinator)."""
    if not calls:
        return
    version = await orch.version()
    ids = ",".join(sorted(str(call["tool_call_id"]) for call in calls))
    await orch.apply(_OpenApprovals(orch.name, agent, run_id, calls, version + 1),
                     request_id=f"{agent}/{run_id}#approvals:{ids}")


def approval_answers(state: Any, run_id: str, *, agent: str | None = None) -> dict[str, ApprovalAnswer] | None:
    """The answers to the approvals of agent run ``run_id`` (of ``agent`` when given), by tool
    call id; None while one is still open, or when none was asked."""
    record = read_record(state)
    if record is None:
        return None
    mine = [i for i in record.interrupts.values()
            if isinstance(i.question, dict) and i.question.get("run_id") == run_id
            and (agent is None or i.question.get("agent") == agent)]
    if not mine or any(i.is_open for i in mine):
        return None
    answers: dict[str, ApprovalAnswer] = {}
    for interrupt in mine:
        assert isinstance(interrupt.question, dict)
        answers[str(interrupt.question["tool_call_id"])] = ApprovalAnswer(approved=interrupt.status == "approved",
                                                                         reason=interrupt.reason)
    return answers
