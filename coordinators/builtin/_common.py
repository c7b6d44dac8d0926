"""Helpers the built-in coordinators share: state reads, call keys, the trail, the stages.

Everything here is pure: it reads a `ContextSnapshot` and builds `TransitionBatch`es.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinators import ContextSnapshot, Message, TransitionBatch, thaw

__all__ = [
    "CODE_TOOLS",
    "STAGES",
    "TRAIL_LIMIT",
    "append_trail",
    "call_key",
    "message_text",
    "read_state",
    "stage_rank",
]

#: The skills the built-in coordinators plan (served by `actors.builtin.code_skills`).
CODE_TOOLS = ("list_tree", "search_code", "read_excerpt", "python_imports")

#: A run's stages, in the only order they may be entered.
#: initial      nothing classified yet;
#: exploring    listing the tree and searching for the task's keywords;
#: reading      reading excerpts of the best hits and following imports;
#: summarising  nothing left to explore, the summary is being written;
#: complete     the summary is in state; the run stops.
STAGES = ("initial", "exploring", "reading", "summarising", "complete")

#: The reasoning trail keeps at most this many (most recent) entries.
TRAIL_LIMIT = 200


def stage_rank(stage: str) -> int:
    """Position of ``stage`` in `STAGES` (an unknown stage ranks as "initial")."""
    return STAGES.index(stage) if stage in STAGES else 0


def read_state(snapshot: ContextSnapshot, key: str, default: Any) -> Any:
    """A fresh, plain (mutable, JSON-clean) copy of a state value, or ``default``."""
    value = snapshot.get_state(key, None)
    return thaw(value) if value is not None else default


def call_key(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The canonical text of a call, as recorded in ``calls_made``."""
    return tool_name + json.dumps(thaw(arguments), sort_keys=True)


def message_text(message: Any) -> str:
    """The text of the message a coordinator was given (a `Message`, a str or None)."""
    if isinstance(message, Message):
        return message.content
    return "" if message is None else str(message)


def append_trail(
    batch: TransitionBatch, snapshot: ContextSnapshot, coordinator: str, reasoning: str
) -> TransitionBatch:
    """Add an ``update_state`` appending ``{coordinator, reasoning}`` to ``trail``."""
    trail = read_state(snapshot, "trail", [])
    trail.append({"coordinator": coordinator, "reasoning": reasoning})
    return batch.update_state("trail", trail[-TRAIL_LIMIT:])
