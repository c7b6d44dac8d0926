"""Frozen records are shared between successive states: by deep copies, and by validation
from JSON given ``shared_records(...).context()``; what validation decides never changes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from coordinators import AgentState, Message, PendingToolCall, Session, shared_records


def _state(n: int) -> AgentState:
    state = AgentState(sessions={"s": Session("s")}, pending_tool_calls={"c": PendingToolCall("c", "tool", {"a": [1, 2]})})
    state.messages.extend(Message("user", f"message {i}", metadata={"i": i, "tags": ["x"]}) for i in range(n))
    return state


def _revalidated(state: BaseModel) -> BaseModel:
    """What the orchestrator does after ``fn``: validate the state again from its JSON."""
    return type(state).model_validate_json(state.model_dump_json(), context=shared_records(state).context())


def test_a_deep_copy_shares_the_frozen_records_and_copies_their_containers():
    state = _state(3)
    twin = copy.deepcopy(state)
    assert twin.messages is not state.messages and twin.sessions is not state.sessions
    assert all(a is b for a, b in zip(twin.messages, state.messages))
    assert twin.sessions["s"] is state.sessions["s"] and twin.pending_tool_calls["c"] is state.pending_tool_calls["c"]


def test_validation_from_json_reuses_every_unchanged_record_and_builds_the_changed_ones():
    state = _state(50)
    working = copy.deepcopy(state)
    working.messages[7] = Message("assistant", "changed")
    working.messages.append(Message("user", "new"))
    new = _revalidated(working)
    plain = AgentState.model_validate_json(working.model_dump_json())
    assert new == plain and new.model_dump_json() == plain.model_dump_json()
    reused = [i for i, (a, b) in enumerate(zip(new.messages, state.messages)) if a is b]
    assert reused == [i for i in range(50) if i != 7]
    assert new.messages[7] is working.messages[7] and new.messages[50] is working.messages[50]  # the fn's own, unchanged by JSON
    assert new.sessions["s"] is state.sessions["s"] and new.pending_tool_calls["c"] is state.pending_tool_calls["c"]


class LoudMessage(Message):
    """A subclass: not known to be deeply immutable, so always copied and rebuilt."""


def test_a_subclass_of_a_record_is_copied_and_rebuilt_as_validation_decides():
    class Holder(BaseModel):
        messages: list[Message]

    loud = LoudMessage("user", "hi")
    holder = Holder(messages=[loud])
    assert copy.deepcopy(holder).messages[0] is not loud
    new = _revalidated(holder)
    assert type(new.messages[0]) is Message and new.messages[0] == Message("user", "hi")


def test_records_reached_through_an_untyped_field_leave_validation_as_it_was():
    class Mixed(BaseModel):
        loose: Any = None  # dumped as JSON objects, validated back as plain dicts
        messages: list[Message] = []

    mixed = Mixed(loose=[Message("user", f"loose {i}") for i in range(5)], messages=[Message("user", "typed")])
    new = _revalidated(mixed)
    assert new == Mixed.model_validate_json(mixed.model_dump_json())
    assert new.loose == [{"role": "user", "content": f"loose {i}", "name": None, "tool_call_id": None, "metadata": {}}
                         for i in range(5)]


def test_a_record_that_no_longer_validates_still_fails_with_the_context():
    state = _state(2)
    text = state.model_dump_json().replace('"role":"user"', '"role":""', 1)
    with pytest.raises(ValidationError, match="Message.role must be a non-empty string"):
        AgentState.model_validate_json(text, context=shared_records(state).context())
