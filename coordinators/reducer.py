"""`reduce(state, batch)`: apply a batch of transitions, purely and all-or-nothing.

The input state is never touched: effects go to a copy-on-write working set that copies a
field the first time a transition writes it (a shallow copy of `messages`, whose items are
frozen; a deep copy of touched JSON dicts). If any transition fails, `TransitionError` is
raised and the working set is dropped. Untouched fields are shared between the input and
the output, so treat both as values (deep-copy before mutating in place).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from coordinators._frozen import FrozenDict, thaw
from coordinators.exceptions import TransitionError
from coordinators.state import AgentState, Message, PendingToolCall, Session
from coordinators.transitions import StateTransition, TransitionType

__all__ = ["reduce"]

S = TypeVar("S", bound=AgentState)

_SCOPE_FIELDS = {"conversation": "conversation_state", "session": "session_state"}
_ATOMS = (type(None), bool, int, float, str)


class _Reject(Exception):
    """A transition cannot apply; carries the reason for `TransitionError`."""


def _deep_copy(value: Any) -> Any:
    """Deep copy for JSON-like data, faster than `copy.deepcopy` on plain dicts/lists."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {key: _deep_copy(item) for key, item in value.items()}
    if kind is list:
        return [_deep_copy(item) for item in value]
    return copy.deepcopy(value)


# How a field is copied the first time a batch writes to it.
_COPIERS: dict[str, Callable[[Any], Any]] = {
    "messages": list,  # Message is frozen: sharing items is safe
    "sessions": dict,  # Session is frozen
    "pending_tool_calls": dict,  # PendingToolCall is frozen
    "conversation_state": _deep_copy,
    "session_state": _deep_copy,
    "capabilities": _deep_copy,
}


class _Working:
    """Copy-on-write view over a state: reads fall through, first writes copy."""

    # _state: the input state, never mutated.
    # changes: field name -> new value, for every field some transition wrote.
    __slots__ = ("_state", "changes")

    def __init__(self, state: AgentState) -> None:
        self._state = state
        self.changes: dict[str, Any] = {}

    def read(self, name: str) -> Any:
        """The current value of field `name` (do not mutate it)."""
        return self.changes[name] if name in self.changes else getattr(self._state, name)

    def write(self, name: str) -> Any:
        """The working copy of container field `name`, made on first use."""
        if name not in self.changes:
            self.changes[name] = _COPIERS[name](getattr(self._state, name))
        return self.changes[name]

    def set(self, name: str, value: Any) -> None:
        """Replace field `name` outright (no copy of the old value needed)."""
        self.changes[name] = value


def _message(data: FrozenDict) -> Message:
    return Message.model_validate(dict(data))


def _add_message(work: _Working, data: FrozenDict) -> None:
    work.write("messages").append(_message(data["message"]))


def _add_messages(work: _Working, data: FrozenDict) -> None:
    work.write("messages").extend(_message(item) for item in data["messages"])


def _scope_field(work: _Working, scope: str) -> str:
    if scope == "session" and not work.read("session_id"):
        raise _Reject("scope 'session' needs an open session (session_id is empty)")
    return _SCOPE_FIELDS[scope]


def _update_state(work: _Working, data: FrozenDict) -> None:
    field = _scope_field(work, data["scope"])
    work.write(field)[data["key"]] = thaw(data["value"])


def _delete_state(work: _Working, data: FrozenDict) -> None:
    field = _scope_field(work, data["scope"])
    if data["key"] not in work.read(field):
        raise _Reject(f"key {data['key']!r} not in {field}")
    del work.write(field)[data["key"]]


def _create_session(work: _Working, data: FrozenDict) -> None:
    session_id = data["session_id"]
    if session_id in work.read("sessions"):
        raise _Reject(f"session {session_id!r} is already open")
    work.write("sessions")[session_id] = Session(session_id, data.get("metadata") or {})
    work.set("session_id", session_id)
    work.set("session_state", {})


def _close_session(work: _Working, data: FrozenDict) -> None:
    session_id = data["session_id"]
    if session_id not in work.read("sessions"):
        raise _Reject(f"session {session_id!r} is not open")
    del work.write("sessions")[session_id]
    if work.read("session_id") == session_id:
        work.set("session_id", "")
        work.set("session_state", {})


def _execute_tool(work: _Working, data: FrozenDict) -> None:
    call_id = data["call_id"]
    if call_id in work.read("pending_tool_calls"):
        raise _Reject(f"tool call {call_id!r} is already pending")
    work.write("pending_tool_calls")[call_id] = PendingToolCall(call_id, data["tool_name"], data["arguments"])


def _tool_result(work: _Working, data: FrozenDict) -> None:
    call_id = data["call_id"]
    if call_id not in work.read("pending_tool_calls"):
        raise _Reject(f"no pending tool call {call_id!r}")
    call = work.write("pending_tool_calls").pop(call_id)
    output = data["output"]
    content = output if isinstance(output, str) else json.dumps(output, sort_keys=True)
    message = Message("tool", content, name=call.tool_name, tool_call_id=call_id, metadata={"is_error": data["is_error"]})
    work.write("messages").append(message)


def _update_capability(work: _Working, data: FrozenDict) -> None:
    work.write("capabilities")[data["name"]] = thaw(data["value"])


def _update_stage(work: _Working, data: FrozenDict) -> None:
    work.set("conversation_stage", data["stage"])


_EFFECTS: dict[TransitionType, Callable[[_Working, FrozenDict], None]] = {
    TransitionType.ADD_MESSAGE: _add_message,
    TransitionType.ADD_MESSAGES: _add_messages,
    TransitionType.UPDATE_STATE: _update_state,
    TransitionType.DELETE_STATE: _delete_state,
    TransitionType.CREATE_SESSION: _create_session,
    TransitionType.CLOSE_SESSION: _close_session,
    TransitionType.EXECUTE_TOOL: _execute_tool,
    TransitionType.TOOL_RESULT: _tool_result,
    TransitionType.UPDATE_CAPABILITY: _update_capability,
    TransitionType.UPDATE_STAGE: _update_stage,
}


def reduce(state: S, batch: Iterable[StateTransition]) -> S:
    """Return a new state (same type as `state`) with every transition of `batch` applied.

    `batch` is a `TransitionBatch` or any iterable of `StateTransition`, applied in order
    (later transitions see earlier effects). Raises `TransitionError` naming the first
    failing transition; then no state is returned and `state` is exactly as it was.
    """
    if not isinstance(state, AgentState):
        raise TypeError(f"reduce expects an AgentState, got {type(state).__name__}")
    transitions = tuple(batch)
    for index, transition in enumerate(transitions):
        if not isinstance(transition, StateTransition):
            raise TypeError(f"reduce: item {index} of the batch is a {type(transition).__name__}, not a StateTransition")
    if not transitions:
        return state.model_copy()
    work = _Working(state)
    for index, transition in enumerate(transitions):
        try:
            _EFFECTS[transition.transition_type](work, transition.data)
        except _Reject as exc:
            raise TransitionError(index, transition, str(exc)) from None
        except (ValueError, TypeError, KeyError) as exc:  # a malformed transition built around validation
            raise TransitionError(index, transition, f"{type(exc).__name__}: {exc}") from exc
    return state.model_copy(update=work.changes)
