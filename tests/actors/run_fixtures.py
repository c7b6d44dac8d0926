"""User-written coordinators and skills for the Run tests, built from public names only.

Every coordinator and skill appends a line to a side-effect file each time it really runs
(from inside its own Ray actor), so tests count what happened, not what the runtime says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from actors import SkillRegistry, ask_approval
from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch


def mark(path: str | None, what: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(what + "\n")
            handle.flush()
            os.fsync(handle.fileno())  # a ledger line is on disk before the body returns


def counts(path: str | Path) -> dict[str, int]:
    """How many times each coordinator / skill ran, from the side-effect file."""
    seen: dict[str, int] = {}
    p = Path(path)
    if p.exists():
        for line in p.read_text().splitlines():
            seen[line] = seen.get(line, 0) + 1
    return seen


class EchoIn(BaseModel):
    text: str
    log: str = ""


class EchoOut(BaseModel):
    echoed: str


def skill_registry() -> SkillRegistry:
    skills = SkillRegistry()

    @skills.skill("echo")
    def echo(inp: EchoIn) -> EchoOut:
        mark(inp.log, f"skill:echo:{inp.text}")
        return EchoOut(echoed=inp.text.upper())

    return skills


class Planner:
    """Turn 1: plans two echo calls (with fixed call ids), hands off to the worker."""

    name = "planner"

    def __init__(self, log: str = "", approve: str = "none", confidence: float = 1.0) -> None:
        self.log, self.approve, self.confidence = log, approve, confidence

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        mark(self.log, "coordinator:planner")
        batch = TransitionBatch().update_state("plan", ["a", "b"]).update_stage("working")
        batch.execute_tool("echo", {"text": "a", "log": self.log}, call_id="call-a")
        batch.execute_tool("echo", {"text": "b", "log": self.log}, call_id="call-b")
        result = CoordinatorResult(transitions=batch, reasoning=f"plan for {message}", confidence=self.confidence,
                                   handoff_to="worker")
        if self.approve == "each":  # two separate approvals, open at once
            result = ask_approval(result, {"call": "a", "why": "writes a"}, call_ids=["call-a"])
            result = ask_approval(result, {"call": "b", "why": "writes b"}, call_ids=["call-b"])
        elif self.approve == "one":
            result = ask_approval(result, {"calls": ["a", "b"]})
        elif self.approve == "turn":
            result = ask_approval(result, "apply this plan?", whole_turn=True)
        return result


class Worker:
    """Reads the tool results into state, hands off to the reviewer."""

    name = "worker"

    def __init__(self, log: str = "") -> None:
        self.log = log

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        mark(self.log, "coordinator:worker")
        outputs = sorted(m.content for m in snapshot.messages if m.role == "tool")
        return CoordinatorResult(transitions=TransitionBatch().update_state("outputs", outputs),
                                 reasoning=f"{len(outputs)} result(s)", confidence=0.9, handoff_to="reviewer")


class Reviewer:
    """Completes the run and stops it."""

    name = "reviewer"

    def __init__(self, log: str = "") -> None:
        self.log = log

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        mark(self.log, "coordinator:reviewer")
        return CoordinatorResult(transitions=TransitionBatch().update_stage("complete"), reasoning="reviewed",
                                 should_continue=False)


def three(log: str = "", **planner: Any) -> list[Any]:
    return [Planner(log, **planner), Worker(log), Reviewer(log)]
