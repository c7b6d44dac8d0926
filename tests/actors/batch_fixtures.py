"""A run whose first turn asks for a batch of tool calls, some fast and some that block until
the test releases them; every skill body appends its call id to an fsynced ledger from its
own process, so a test counts how often each body really ran."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from actors import SkillRegistry
from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch
from tests._waits import HANG_GUARD_S, wait_for_file

FAST = ("fast-1", "fast-2")
SLOW = ("slow-1", "slow-2")


class LedgerIn(BaseModel):
    call: str
    ledger: str
    release: str = ""
    """A slow call blocks until this file exists ("" for a fast one)."""


class LedgerOut(BaseModel):
    call: str


def append_line(path: str, line: str) -> None:
    """Append ``line`` and fsync it: the line is on disk before the body goes on."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def ledger_counts(path: Path) -> dict[str, int]:
    seen: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            seen[line] = seen.get(line, 0) + 1
    return seen


def ledger_skills() -> SkillRegistry:
    skills = SkillRegistry()

    @skills.skill("ledgered")
    def ledgered(inp: LedgerIn) -> LedgerOut:
        append_line(inp.ledger, inp.call)
        if inp.release:
            wait_for_file(Path(inp.release), timeout=4 * HANG_GUARD_S)  # outlasts every wait of the test
        return LedgerOut(call=inp.call)

    return skills


class Batcher:
    """Turn 1: asks for the fast and the slow calls at once (fixed call ids)."""

    name = "batcher"

    def __init__(self, ledger: str, release: str) -> None:
        self.ledger, self.release = ledger, release

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        batch = TransitionBatch().update_stage("working")
        for call in FAST:
            batch.execute_tool("ledgered", {"call": call, "ledger": self.ledger}, call_id=call)
        for call in SLOW:
            batch.execute_tool("ledgered", {"call": call, "ledger": self.ledger, "release": self.release}, call_id=call)
        return CoordinatorResult(transitions=batch, reasoning="four calls", handoff_to="closer")


class Closer:
    """Turn 2: records the tool outputs and completes the run."""

    name = "closer"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        outputs = sorted(m.content for m in snapshot.messages if m.role == "tool")
        batch = TransitionBatch().update_state("outputs", outputs).update_stage("complete")
        return CoordinatorResult(transitions=batch, reasoning="all results in", should_continue=False)
