"""Tool calls waiting for approval as interrupts of the run, answered as every run's are.

An agent run that ends with pydantic-ai's ``DeferredToolRequests`` holding approvals (tools
declared ``requires_approval=True``) opens one interrupt per call in its run's record
(``actors.interrupts``): the run waits durably, and ``soloist approve``, the runs page or
``answer_interrupt`` answer it from any process. ``answers`` turns the answered interrupts
into the ``DeferredToolResults`` the agent continues with; the earlier steps are answered
from the journal when the agent run is replayed to get its messages back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from actors.interrupts import RUN_RECORD_KEY, Interrupt, RunRecord, read_record
from actors.orchestrator.facade import Orchestrator
from actors.pydantic_ai._journal import AgentJournal

__all__ = ["open_approvals", "answers"]


def _question(agent: str, run_id: str, call: Any) -> dict[str, Any]:
    return {"agent": agent, "run_id": run_id, "tool": call.tool_name, "args": call.args_as_dict(),
            "tool_call_id": call.tool_call_id}


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


async def open_approvals(orch: Orchestrator[Any], agent: str, run_id: str, requests: DeferredToolRequests) -> None:
    """Open an interrupt for each call of ``requests`` that needs approval (once per call: a
    replayed run writes nothing new)."""
    calls = tuple(_question(agent, run_id, call) for call in requests.approvals)
    if not calls:
        return
    version = await orch.version()
    await orch.apply(_OpenApprovals(orch.name, agent, run_id, calls, version + 1),
                     request_id=f"{agent}/{run_id}#approvals")


def answers(state: Any, agent: str, run_id: str) -> DeferredToolResults | None:
    """The answers to the agent run's approvals, as pydantic-ai takes them; None while one is
    still open (or none was asked)."""
    record = read_record(state)
    if record is None:
        return None
    mine = [i for i in record.interrupts.values()
            if isinstance(i.question, dict) and i.question.get("agent") == agent and i.question.get("run_id") == run_id]
    if not mine or any(i.is_open for i in mine):
        return None
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for interrupt in mine:
        assert isinstance(interrupt.question, dict)
        call_id = str(interrupt.question["tool_call_id"])
        if interrupt.status == "approved":
            approvals[call_id] = True
        else:
            approvals[call_id] = ToolDenied(f"rejected by a person: {interrupt.reason}" if interrupt.reason
                                            else "rejected by a person")
    return DeferredToolResults(approvals=approvals)
