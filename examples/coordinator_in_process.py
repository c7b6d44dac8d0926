"""Test a coordinator in this process, without Ray: each turn is applied to a ``RunCore``, the
very single writer a run on a cluster has (validation, all-or-nothing batches, the journal,
exactly-once request ids), then the run is taken up again from its store.

    python examples/coordinator_in_process.py [STORE]

Prints the message count, the words counted, the stage and the version after resuming.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from actors import RunCore
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch, TransitionError


class WordCounter:
    """A coordinator: records each message and keeps a running count of its words; done at 5."""

    name = "word-counter"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        words = snapshot.get_state("words", 0) + len(message.split())
        batch = TransitionBatch().add_message({"role": "user", "content": message}).update_state("words", words)
        if words >= 5:
            batch.update_stage("complete")
        return CoordinatorResult(transitions=batch, reasoning=f"{words} words so far", should_continue=words < 5)


async def main(store: str) -> None:
    coordinator = WordCounter()
    async with RunCore(AgentState(), name="counting", store=store) as core:
        for message in ["one two", "three four five"]:
            snapshot = await core.context()
            result = await coordinator.process(snapshot, message)
            # A compare-and-set on the version the coordinator read, as the run loop does.
            await core.apply_batch(result.transitions, expected_version=snapshot.version)
        try:  # a transition that cannot apply fails the whole batch: nothing of it is committed
            await core.apply_batch(TransitionBatch().update_state("words", 0).delete_state("missing"))
        except TransitionError as exc:
            print(f"refused: {exc.reason}")
    async with RunCore.resume("counting", store=store) as again:
        context = await again.context()
        print(context.message_count, context.get_state("words"), context.conversation_stage, context.version)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(scratch) / "runs.sqlite")))
