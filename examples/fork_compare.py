"""Fork one run into two branches and compare where they end.

A ``pricer`` coordinator proposes a price change and asks a person to approve the whole
turn (``whole_turn=True``: nothing is applied until then). While the run waits, we fork it
at its current version: the fork's state equals the original's exactly. Then one branch
approves and the other rejects, each is resumed, and the two outcomes are compared. The
original run's history is untouched by anything done to the fork.

    python examples/fork_compare.py --store /tmp/runs.sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from actors import Orchestrator, Run, answer_interrupt, ask_approval, open_interrupts
from cluster import connect
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch


class Pricer:
    name = "pricer"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        price = snapshot.get_state("price", 100)
        batch = TransitionBatch().update_state("price", price * 2).update_state("changed_by", "pricer")
        result = CoordinatorResult(transitions=batch, reasoning=f"double the price to {price * 2}", confidence=0.6,
                                   handoff_to="auditor")
        return ask_approval(result, {"change": "price", "from": price, "to": price * 2}, whole_turn=True)


class Auditor:
    name = "auditor"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        price = snapshot.get_state("price", 100)
        batch = TransitionBatch().update_state("audit", f"price is {price}").update_stage("complete")
        return CoordinatorResult(transitions=batch, reasoning=f"audited at {price}", should_continue=False)


async def main(store: str | None) -> int:
    connect()
    original = Orchestrator(AgentState(), store=store)
    coordinators = [Pricer(), Auditor()]
    try:
        await original.apply_batch(TransitionBatch().update_state("price", 100))
        waiting = await Run(original, coordinators, first="pricer", fallback="auditor").run("review prices")
        at = await original.version()
        print(f"original waits at version {at}: {waiting.interrupts[0].question}")
        fork = await original.fork(f"{original.name}-what-if", at_version=at)
        try:
            same = (await fork.snapshot()).model_dump_json() == (await original.state_at(at)).model_dump_json()
            print(f"fork equals the original at version {at}: {same}")
            (ask,) = await open_interrupts(original)
            await answer_interrupt(original, ask.id, approve=True)
            await answer_interrupt(fork, ask.id, approve=False, reason="keep prices")
            approved = await Run(original, coordinators, first="pricer", fallback="auditor").resume()
            rejected = await Run(fork, coordinators, first="pricer", fallback="auditor").resume()
            print(f"approved branch: price={approved.state['price']} audit={approved.state['audit']!r}")
            print(f"rejected branch: price={rejected.state['price']} audit={rejected.state['audit']!r}")
            history = await original.history(since=at)
            print(f"original history after the fork: versions {[c.version for c in history]}")
            return 0 if same and approved.state["price"] == 200 and rejected.state["price"] == 100 else 1
        finally:
            await fork.close()
    finally:
        await original.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="a SQLite file (default: memory only)")
    sys.exit(asyncio.run(main(parser.parse_args().store)))
