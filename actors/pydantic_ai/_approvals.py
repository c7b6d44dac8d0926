"""Tool calls waiting for approval as interrupts of the run, answered as every run's are.

An agent run that ends with pydantic-ai's ``DeferredToolRequests`` holding approvals (tools
declared ``requires_approval=True``) opens one interrupt per call in its run's record
(``actors.agents._approval_interrupts``): the run waits durably, and ``soloist approve``,
the runs page or ``answer_interrupt`` answer it from any process. ``answers`` turns the
answered interrupts into the ``DeferredToolResults`` the agent continues with; the earlier
steps are answered from the journal when the agent run is replayed to get its messages back.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from actors.agents._approval_interrupts import approval_answers, approval_question
from actors.agents._approval_interrupts import open_approvals as open_interrupts
from actors.orchestrator.facade import Orchestrator

__all__ = ["open_approvals", "answers"]


async def open_approvals(orch: Orchestrator[Any], agent: str, run_id: str, requests: DeferredToolRequests) -> None:
    """Open an interrupt for each call of ``requests`` that needs approval (once per call: a
    replayed run writes nothing new)."""
    calls = tuple(approval_question(agent, run_id, call.tool_name, call.args_as_dict(), call.tool_call_id)
                  for call in requests.approvals)
    await open_interrupts(orch, agent, run_id, calls)


def answers(state: Any, agent: str, run_id: str) -> DeferredToolResults | None:
    """The answers to the agent run's approvals, as pydantic-ai takes them; None while one is
    still open (or none was asked)."""
    answered = approval_answers(state, run_id, agent=agent)
    if answered is None:
        return None
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call_id, answer in answered.items():
        if answer.approved:
            approvals[call_id] = True
        else:
            approvals[call_id] = ToolDenied(f"rejected by a person: {answer.reason}" if answer.reason
                                            else "rejected by a person")
    return DeferredToolResults(approvals=approvals)
