"""``Change``: one committed event in a run, as delivered by ``Orchestrator.subscribe``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from cluster.storage import JournalEntry
from coordinators import StateTransition

__all__ = ["Change", "ChangeKind"]

#: ``batch``: ``apply_batch`` committed transitions; ``fn``: ``apply(fn)`` committed a new
#: state (no transitions to show); ``agent_state``: a managed agent's record changed (the
#: state version does not move).
ChangeKind = Literal["batch", "fn", "agent_state"]


class Change(BaseModel):
    """A committed change, in commit order.

    ``version`` is the state version after the change; ``transitions`` is None when an
    ``fn`` ran. ``seq`` orders every event of the run, agent events included. Changes read
    back with ``Orchestrator.history`` also carry the ``request_id`` they were committed
    with and, for an ``fn``, the JSON ``diff`` it made to the state.
    """

    model_config = ConfigDict(frozen=True)

    seq: int
    version: int
    kind: ChangeKind = "batch"
    transitions: tuple[StateTransition, ...] | None = None
    at: float
    agent: dict[str, Any] | None = None
    request_id: str | None = None
    diff: Any = None

    @classmethod
    def of_entry(cls, entry: JournalEntry) -> Change:
        """The change a stored journal entry records (as ``history`` returns it)."""
        if entry.kind == "batch":
            transitions = tuple(StateTransition.model_validate(t) for t in entry.payload)
            return cls(seq=0, version=entry.version, kind="batch", transitions=transitions, at=entry.created_at,
                       request_id=entry.request_id)
        return cls(seq=0, version=entry.version, kind="fn", at=entry.created_at, request_id=entry.request_id,
                   diff=entry.payload)
