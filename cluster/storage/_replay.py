"""Rebuilding a stored state: a checkpoint plus the journal entries after it.

The one reading of the journal's two kinds of entry: an ``fn`` entry is a JSON diff
(``diff.py``) applied to the previous state's document, a ``batch`` entry is transitions
applied with ``coordinators.reduce``. The orchestrator's recovery, its ``history``,
``state_at`` and ``fork``, and the runs page's view of a stored run all replay through here,
so they agree on every version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from coordinators import StateTransition, reduce

from .base import Checkpoint, JournalEntry
from .diff import apply_diff
from .exceptions import JournalGap, StoreCorrupted

__all__ = ["replay"]

S = TypeVar("S", bound=BaseModel)


def replay(
    checkpoint: Checkpoint, entries: Sequence[JournalEntry], state_type: type[S], *, run: str, path: str | None = None
) -> S:
    """The state as of the last of ``entries`` (``checkpoint``'s when there are none).

    ``entries`` must continue the checkpoint version by version (``Store.load`` and
    ``Store.load_at`` return them so). A gap raises ``JournalGap``; an entry that does not
    apply, or a state that does not validate as ``state_type``, raises ``StoreCorrupted``
    naming the run, the entry and ``path``: nothing is ever skipped.

    ``fn`` diffs are applied to the JSON document of the previous state, kept from one entry
    to the next (every diff was taken between the JSON of two validated states, so this is
    that state's dump without dumping it again); each result is still validated, so a bad
    entry is named where it is. ``batch`` entries need an ``AgentState`` (``reduce``'s type).
    """
    state = _validated(state_type, checkpoint.state, path, f"checkpoint at version {checkpoint.version}")
    doc: Any = checkpoint.state  # the JSON document of ``state``; None after a batch entry (dumped when needed)
    version = checkpoint.version
    for entry in entries:
        if entry.version != version + 1:
            raise JournalGap(path=path, run=run, missing=version + 1, detail=f"the journal jumps to {entry.version}")
        if entry.kind == "batch":
            try:
                transitions = tuple(StateTransition.model_validate(t) for t in entry.payload)
                state = reduce(state, transitions)  # type: ignore[type-var]  # batch entries exist only for AgentState runs
            except Exception as exc:
                raise StoreCorrupted(
                    path=path, problem=f"journal entry {entry.version} of run {run!r} does not replay: {exc}"
                ) from exc
            doc = None
        else:
            try:
                doc = apply_diff(doc if doc is not None else state.model_dump(mode="json"), entry.payload)
            except Exception as exc:  # a damaged diff: name the entry, never guess
                raise StoreCorrupted(
                    path=path, problem=f"journal entry {entry.version} of run {run!r} does not apply: {exc}"
                ) from exc
            state = _validated(state_type, doc, path, f"journal entry {entry.version}")
        version = entry.version
    return state


def _validated(state_type: type[S], doc: Any, path: str | None, what: str) -> S:
    try:
        return state_type.model_validate(doc)
    except Exception as exc:
        raise StoreCorrupted(path=path, problem=f"the {what} does not validate as {state_type.__name__}: {exc}") from exc
