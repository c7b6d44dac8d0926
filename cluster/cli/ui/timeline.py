"""Committed changes as timeline entries: compact, JSON text cut to a bounded size.

A timeline of 10,000 versions must stay cheap to send, so each entry carries at most
``MAX_TRANSITIONS`` transitions and each transition's data at most ``MAX_DATA_CHARS``
characters of JSON (``cut`` says when something was left out).
"""

from __future__ import annotations

import json
from typing import Any

from actors import Change
from coordinators import thaw
from cluster.cli.ui.models import TimelineEntry, TransitionView

__all__ = ["entry_from_change", "entry_from_journal", "reasoning_trail", "run_status", "MAX_TRANSITIONS", "MAX_DATA_CHARS"]

MAX_TRANSITIONS = 8
MAX_DATA_CHARS = 240


def _view(kind: str, data: Any) -> TransitionView:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    cut = len(text) > MAX_DATA_CHARS
    return TransitionView(type=kind, data=text[:MAX_DATA_CHARS] + ("…" if cut else ""), cut=cut)


def _trail_reasoning(transitions: list[tuple[str, Any]]) -> tuple[str | None, str | None]:
    """The coordinator and reasoning a built-in coordinator appended to ``trail`` in this batch."""
    for kind, data in transitions:
        if kind == "update_state" and isinstance(data, dict) and data.get("key") == "trail":
            value = data.get("value")
            if isinstance(value, list) and value and isinstance(value[-1], dict):
                last = value[-1]
                return _str_or_none(last.get("coordinator")), _str_or_none(last.get("reasoning"))
    return None, None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _entry(version: int, kind: str, at: float | None, transitions: list[tuple[str, Any]], meta: dict[str, Any]) -> TimelineEntry:
    coordinator, reasoning = _trail_reasoning(transitions)
    confidence = meta.get("confidence")
    return TimelineEntry(
        version=version, kind=kind, at=at,
        transitions=[_view(k, d) for k, d in transitions[:MAX_TRANSITIONS]],
        more_transitions=max(0, len(transitions) - MAX_TRANSITIONS),
        reasoning=_str_or_none(meta.get("reasoning")) or reasoning,
        confidence=float(confidence) if isinstance(confidence, (int, float)) and not isinstance(confidence, bool) else None,
        coordinator=_str_or_none(meta.get("coordinator")) or coordinator,
    )


def entry_from_change(change: Change) -> TimelineEntry:
    """A ``Change`` from ``history``/``subscribe`` as one timeline entry."""
    transitions = [(t.transition_type.value, thaw(t.data)) for t in change.transitions or ()]
    if change.transitions is None and change.diff is not None:
        transitions = [("state_diff", change.diff)]
    meta = {k: getattr(change, k, None) for k in ("reasoning", "confidence", "coordinator")}
    extra = getattr(change, "metadata", None)
    if isinstance(extra, dict):
        meta = {**extra, **{k: v for k, v in meta.items() if v is not None}}
    return _entry(change.version, change.kind, change.at, transitions, meta)


def entry_from_journal(version: int, kind: str, payload: Any, at: float) -> TimelineEntry:
    """A stored journal row (transitions of a batch, or the diff an ``fn`` made)."""
    if kind == "batch" and isinstance(payload, list):
        transitions = [(str(t.get("transition_type")), t.get("data")) for t in payload if isinstance(t, dict)]
    else:
        transitions = [("state_diff", payload)]
    return _entry(version, kind, at, transitions, {})


def run_status(state: Any) -> str | None:
    """The status a ``Run`` keeps in its state (``running``, ``waiting``, ``complete``, ...), if any."""
    conversation = state.get("conversation_state") if isinstance(state, dict) else None
    record = conversation.get("soloist.run") if isinstance(conversation, dict) else None
    status = record.get("status") if isinstance(record, dict) else None
    return status if isinstance(status, str) else None


def reasoning_trail(state: Any) -> list[dict[str, Any]]:
    """The coordinators' reasoning the built-in run keeps in ``conversation_state.trail``."""
    if not isinstance(state, dict):
        return []
    trail = (state.get("conversation_state") or {}).get("trail") if isinstance(state.get("conversation_state"), dict) else None
    if not isinstance(trail, list):
        return []
    return [{"coordinator": _str_or_none(t.get("coordinator")), "reasoning": _str_or_none(t.get("reasoning")),
             "confidence": t.get("confidence")} for t in trail if isinstance(t, dict)]
