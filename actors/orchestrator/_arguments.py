"""The checks of a write's arguments, shared by every handle of a run's writer (the
``Orchestrator`` facade, ``RunCore``): the same bad input gets the same error wherever it is
given, before anything reaches the writer."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from cluster.storage import check_request_id
from coordinators import StateTransition, TransitionBatch

__all__ = ["checked_transitions", "request_id_of"]


def checked_transitions(
    batch: TransitionBatch | Iterable[StateTransition] | None, expected_version: int | None
) -> tuple[StateTransition, ...]:
    """``batch``'s transitions, after checking them and ``expected_version`` (``TypeError``
    naming what is wrong)."""
    if batch is None:
        raise TypeError("apply_batch(None): pass a TransitionBatch or an iterable of StateTransition")
    transitions = tuple(batch)
    for i, t in enumerate(transitions):
        if not isinstance(t, StateTransition):
            raise TypeError(f"apply_batch: item {i} is a {type(t).__name__}, not a StateTransition")
    if expected_version is not None and (isinstance(expected_version, bool) or not isinstance(expected_version, int)):
        raise TypeError(f"expected_version must be an int or None, got {type(expected_version).__name__}")
    return transitions


def request_id_of(request_id: str | None) -> str:
    """The request id a write is journalled under: the caller's (checked), or a fresh one."""
    return uuid.uuid4().hex if request_id is None else check_request_id(request_id)
