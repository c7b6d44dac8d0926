"""A multi-agent run with your own coordinators and skills that asks a person once.

Three coordinators take turns on one orchestrator:

- ``researcher`` plans two ``lookup`` calls (run as parallel handoffs to subagents);
- ``writer`` turns the lookups into a draft and plans a ``publish`` call, asking for approval
  first (``ask_approval``): the run stops in ``waiting``, durably;
- ``editor`` checks what happened and ends the run.

Run it whole (the approval is given from this script)::

    python examples/approval_run.py --store /tmp/runs.sqlite

or stop at the approval and answer from the command line, as a person would::

    python examples/approval_run.py --store /tmp/runs.sqlite --name post-1 --stop-at-approval
    soloist approve post-1 post-1/i1 --store /tmp/runs.sqlite
    soloist run --resume post-1 --store /tmp/runs.sqlite

``--effects FILE`` appends one line per coordinator turn and per skill call, to count them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from pydantic import BaseModel

from actors import Orchestrator, Run, SkillRegistry, ask_approval
from cluster import connect
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch


def effect(path: str, what: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(what + "\n")


class LookupIn(BaseModel):
    topic: str
    effects: str = ""


class LookupOut(BaseModel):
    fact: str


class PublishIn(BaseModel):
    text: str
    effects: str = ""


class PublishOut(BaseModel):
    url: str


skills = SkillRegistry()


@skills.skill("lookup")
def lookup(inp: LookupIn) -> LookupOut:
    effect(inp.effects, f"skill:lookup:{inp.topic}")
    return LookupOut(fact=f"{inp.topic} has {len(inp.topic)} letters")


@skills.skill("publish")
def publish(inp: PublishIn) -> PublishOut:
    effect(inp.effects, "skill:publish")  # the side effect a person must approve
    return PublishOut(url=f"https://example.invalid/posts/{abs(hash(inp.text)) % 10_000}")


class Researcher:
    name = "researcher"

    def __init__(self, effects: str) -> None:
        self.effects = effects

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        effect(self.effects, "coordinator:researcher")
        batch = TransitionBatch().update_stage("researching")
        for topic in message.split():
            batch.execute_tool("lookup", {"topic": topic, "effects": self.effects})
        return CoordinatorResult(transitions=batch, reasoning=f"look up {message!r}", handoff_to="writer")


class Writer:
    name = "writer"

    def __init__(self, effects: str) -> None:
        self.effects = effects

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        effect(self.effects, "coordinator:writer")
        facts = sorted(m.content for m in snapshot.messages if m.role == "tool")
        draft = " / ".join(facts)
        batch = TransitionBatch().update_state("draft", draft).update_stage("publishing")
        batch.execute_tool("publish", {"text": draft, "effects": self.effects}, call_id="publish-1")
        result = CoordinatorResult(transitions=batch, reasoning=f"drafted {len(facts)} fact(s)", confidence=0.8,
                                   handoff_to="editor")
        return ask_approval(result, {"action": "publish", "draft": draft}, call_ids=["publish-1"])


class Editor:
    name = "editor"

    def __init__(self, effects: str) -> None:
        self.effects = effects

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        effect(self.effects, "coordinator:editor")
        published = [m for m in snapshot.messages if m.tool_call_id == "publish-1"]
        verdict = "published" if published and not published[0].metadata.get("is_error") else "not published"
        batch = TransitionBatch().update_state("verdict", verdict).update_stage("complete")
        return CoordinatorResult(transitions=batch, reasoning=verdict, should_continue=False)


async def main(store: str | None, name: str | None, effects: str, stop_at_approval: bool) -> int:
    connect()
    orch = Orchestrator(AgentState(), caller=skills, name=name, store=store)
    try:
        run = Run(orch, [Researcher(effects), Writer(effects), Editor(effects)], first="researcher", fallback="editor",
                  on_event=lambda e: print(f"  [{e.kind}] turn {e.turn} {e.coordinator} v{e.version} {e.reasoning or ''}"))
        outcome = await run.run("soloist ray")
        print(f"{outcome.status}: {outcome.reason}")
        if outcome.status == "waiting":
            for interrupt in outcome.interrupts:
                print(f"interrupt {interrupt.id}: {interrupt.question}")
            if stop_at_approval:
                return 3
            for interrupt in outcome.interrupts:  # a person would decide here
                await run.answer(interrupt.id, approve=True, reason="looks good")
            outcome = await run.resume()
        print(f"{outcome.status}: verdict={outcome.state.get('verdict')} turns={outcome.turns} handoffs={outcome.handoffs}")
        return 0 if outcome.status == "complete" else 1
    finally:
        await orch.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="a SQLite file to keep the run in (needed to resume later)")
    parser.add_argument("--name", default=None, help="the run's name")
    parser.add_argument("--effects", default="", help="append a line per coordinator turn and skill call to this file")
    parser.add_argument("--stop-at-approval", action="store_true", help="exit (code 3) when the run waits for approval")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.store, args.name, args.effects, args.stop_at_approval)))
