"""soloist's pure state-passed core: transitions, batches, snapshots and the reducer.

Coordinators read an immutable `ContextSnapshot` and return a `CoordinatorResult` of
validated `StateTransition`s; `reduce` applies them all-or-nothing. Imports no Ray.
"""

from coordinators._frozen import FrozenDict, FrozenList, check_json_clean, freeze, thaw
from coordinators.batch import TransitionBatch
from coordinators.exceptions import SoloistError, TransitionError
from coordinators.protocol import Coordinator
from coordinators.reducer import reduce
from coordinators.result import CoordinatorResult
from coordinators.snapshot import ContextSnapshot
from coordinators.state import AgentState, Message, PendingToolCall, Session, shared_records
from coordinators.transitions import StateTransition, TransitionType

__all__ = [
    "TransitionType",
    "StateTransition",
    "TransitionBatch",
    "CoordinatorResult",
    "Message",
    "AgentState",
    "ContextSnapshot",
    "Coordinator",
    "TransitionError",
    "SoloistError",
    "reduce",
    "PendingToolCall",
    "Session",
    "shared_records",
    "freeze",
    "thaw",
    "FrozenDict",
    "FrozenList",
    "check_json_clean",
]
