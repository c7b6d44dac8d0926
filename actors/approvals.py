"""Approvals at the run layer: read a run's open interrupts and answer them.

``Run.interrupts``/``Run.answer``, ``soloist approve`` and the runs page all go through these
two functions, so an answer is checked and written the same way wherever it comes from. The
orchestrator knows nothing of approvals: an answer is an ordinary compare-and-set batch
(``actors.interrupts.answer_batch``) on the run's state.
"""

from __future__ import annotations

from typing import Any

from actors.exceptions import VersionConflict, WriteRefused
from actors.interrupts import Interrupt, answer_batch, read_record
from actors.orchestrator.facade import Orchestrator

__all__ = ["answer_interrupt", "open_interrupts"]


async def open_interrupts(orchestrator: Orchestrator[Any]) -> list[Interrupt]:
    """The open interrupts of the run (oldest first); [] when nothing waits for an answer."""
    _, state = await orchestrator.versioned_snapshot()
    record = read_record(state)
    return record.open_interrupts() if record is not None else []


async def answer_interrupt(orchestrator: Orchestrator[Any], interrupt_id: str, *, approve: bool,
                           reason: str | None = None) -> int:
    """Answer one open interrupt of the run; return the version that records the answer.

    Approving a held turn applies its transitions in that version; rejecting tool calls
    closes them with an error result carrying ``reason``. The run moves on when it is
    resumed (``Run.resume``, ``soloist run --resume``). An interrupt that is not open here
    (unknown, another run's, already answered) raises ``InterruptNotOpen`` (a subclass
    says which) and nothing is written. Needs the owner's handle (``WriteRefused``).
    """
    if not isinstance(interrupt_id, str) or not interrupt_id:
        raise TypeError(f"answer() takes the interrupt's id (a string), got {interrupt_id!r}")
    if not isinstance(approve, bool):
        raise TypeError(f"answer(approve=...) takes True or False, got {approve!r}")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"answer(reason=...) takes a string or None, got {type(reason).__name__}")
    if orchestrator.read_only:
        raise WriteRefused(
            f"answer() on orchestrator {orchestrator.name!r} needs the owner's handle: this one is read-only "
            "(it was shipped to another process or attached without the store)"
        )
    while True:
        version, state = await orchestrator.versioned_snapshot()
        batch = answer_batch(orchestrator.name, read_record(state), interrupt_id, approve, reason, version + 1)
        try:
            return await orchestrator.apply_batch(batch, expected_version=version)
        except VersionConflict:
            continue  # a write landed in between: check the interrupt again on the new state
