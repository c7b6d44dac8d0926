"""ContextSnapshot: deep immutability, no sharing with the state, helpers, pickling."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest
from pydantic import BaseModel

from coordinators import AgentState, ContextSnapshot, Message, PendingToolCall, Session


class _Plan(BaseModel):
    steps: list[str] = []


class _MyState(AgentState):
    plan: _Plan = _Plan()
    notes: list[dict[str, int]] = []


def _state() -> _MyState:
    return _MyState(
        messages=[Message("user", "hi", metadata={"tags": ["a"]}), Message("assistant", "yo")],
        session_id="s1",
        conversation_state={"plan": {"steps": [1, 2]}, "shared": "c"},
        session_state={"cursor": 3, "shared": "s"},
        observed_files=["a.py"],
        capabilities={"planning": True, "budget": 0, "mode": "fast"},
        sessions={"s1": Session("s1", {"who": "u"})},
        pending_tool_calls={"c1": PendingToolCall("c1", "ls", {"path": ["."]})},
        plan=_Plan(steps=["x"]),
        notes=[{"n": 1}],
    )


MUTATIONS = [
    lambda s: s.conversation_state["plan"]["steps"].append(1),
    lambda s: s.conversation_state.__setitem__("k", 1),
    lambda s: s.conversation_state["plan"].__setitem__("steps", []),
    lambda s: s.session_state.pop("cursor"),
    lambda s: s.capabilities.update(x=1),
    lambda s: s.observed_files.append("b.py"),
    lambda s: s.messages.append(Message("user", "x")),
    lambda s: s.messages[0].metadata["tags"].append("b"),
    lambda s: s.sessions["s1"].metadata.__setitem__("who", "v"),
    lambda s: s.sessions.__delitem__("s1"),
    lambda s: s.pending_tool_calls["c1"].arguments["path"].append(".."),
    lambda s: s.plan.steps.append("y"),
    lambda s: s.notes[0].__setitem__("n", 2),
    lambda s: setattr(s, "version", 5),
    lambda s: setattr(s, "conversation_state", {}),
    lambda s: setattr(s, "new_attribute", 1),
    lambda s: delattr(s, "session_id"),
]


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_mutating_anything_reachable_from_a_snapshot_raises(mutate) -> None:
    snapshot = ContextSnapshot.of(_state(), version=1)
    before = snapshot.model_dump()
    with pytest.raises((TypeError, ValueError)):  # ValueError: pydantic's frozen-model error
        mutate(snapshot)
    assert snapshot.model_dump() == before


def test_nested_mutation_raises_type_error() -> None:
    snapshot = ContextSnapshot.of(_state())
    with pytest.raises(TypeError):
        snapshot.conversation_state["plan"]["steps"].append(1)
    with pytest.raises(TypeError):
        snapshot.conversation_state["k"] = 1
    with pytest.raises(TypeError, match="ContextSnapshot is immutable"):
        snapshot.session_id = "x"  # type: ignore[misc]


def test_later_state_changes_never_show_in_the_snapshot() -> None:
    state = _state()
    snapshot = ContextSnapshot.of(state)
    before = snapshot.model_dump()
    state.conversation_state["plan"]["steps"].append(3)
    state.conversation_state["new"] = 1
    state.messages.append(Message("user", "later"))
    state.observed_files.append("b.py")
    state.plan.steps.append("y")
    state.notes[0]["n"] = 9
    state.capabilities["planning"] = False
    assert snapshot.model_dump() == before
    assert snapshot.conversation_state["plan"]["steps"] == [1, 2] and snapshot.message_count == 2


def test_snapshot_shares_no_mutable_object_with_the_state() -> None:
    state = _state()
    snapshot = ContextSnapshot.of(state)
    assert snapshot.conversation_state is not state.conversation_state
    assert snapshot.conversation_state["plan"] is not state.conversation_state["plan"]
    assert snapshot.messages[0] is not state.messages[0] and snapshot.messages[0] == state.messages[0]
    assert snapshot.sessions["s1"] is not state.sessions["s1"]
    assert snapshot.pending_tool_calls["c1"] is not state.pending_tool_calls["c1"]
    assert snapshot.plan is not state.plan and snapshot.plan.steps is not state.plan.steps


def test_to_state_gives_a_fresh_mutable_state_that_does_not_touch_the_snapshot() -> None:
    state = _state()
    snapshot = ContextSnapshot.of(state)
    rebuilt = snapshot.to_state(_MyState)
    assert type(rebuilt) is _MyState and rebuilt.model_dump() == state.model_dump()
    rebuilt.conversation_state["plan"]["steps"].append(99)
    rebuilt.plan.steps.append("z")
    assert snapshot.conversation_state["plan"]["steps"] == [1, 2] and snapshot.plan.steps == ["x"]
    base = snapshot.to_state()
    assert type(base) is AgentState and base.conversation_state == state.conversation_state


def test_snapshot_exposes_every_field_and_subclass_fields() -> None:
    snapshot = ContextSnapshot.of(_state(), version=7)
    assert snapshot.version == 7 and snapshot.session_id == "s1"
    assert isinstance(snapshot.messages, tuple) and isinstance(snapshot.observed_files, tuple)
    assert snapshot.observed_files == ("a.py",)
    assert snapshot.plan.steps == ["x"] and snapshot.notes == [{"n": 1}]
    assert set(snapshot.extra_fields()) == {"plan", "notes"}


def test_helpers() -> None:
    snapshot = ContextSnapshot.of(_state())
    assert snapshot.message_count == 2 and snapshot.last_message == Message("assistant", "yo")
    assert ContextSnapshot.of(AgentState()).last_message is None
    assert snapshot.get_state("plan") == {"steps": [1, 2]}
    assert snapshot.get_state("cursor") == 3  # falls back to session_state
    assert snapshot.get_state("shared") == "c"  # conversation_state wins
    assert snapshot.get_state("missing", "d") == "d"
    assert snapshot.has_capability("planning") and not snapshot.has_capability("budget")
    assert not snapshot.has_capability("absent")
    assert snapshot.get_capability_value("mode") == "fast" and snapshot.get_capability_value("x", 1) == 1
    assert not snapshot.is_complete
    assert ContextSnapshot.of(AgentState(conversation_stage="complete")).is_complete
    assert set(snapshot.pending_tool_calls) == {"c1"}


def test_snapshot_pickles_and_cloudpickles_still_frozen() -> None:
    snapshot = ContextSnapshot.of(_state(), version=3)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(snapshot))
        assert back == snapshot and back.version == 3 and back.plan.steps == ["x"]
        with pytest.raises(TypeError):
            back.conversation_state["plan"]["steps"].append(1)
        with pytest.raises(TypeError):
            back.messages[0].metadata["tags"].append("z")


def test_snapshot_dumps_to_plain_json() -> None:
    dumped = ContextSnapshot.of(_state(), version=2).model_dump(mode="json")
    assert dumped["conversation_state"] == {"plan": {"steps": [1, 2]}, "shared": "c"}
    assert dumped["plan"] == {"steps": ["x"]} and dumped["version"] == 2


def test_direct_construction_freezes_its_inputs() -> None:
    snapshot = ContextSnapshot(messages=(Message("u", "x"),), conversation_state={"a": [1]}, extra={"b": [2]})
    with pytest.raises(TypeError):
        snapshot.conversation_state["a"].append(2)
    with pytest.raises(TypeError):
        snapshot.extra["b"].append(3)


def test_of_rejects_non_states_bad_versions_and_clashing_field_names() -> None:
    with pytest.raises(TypeError, match="expects an AgentState"):
        ContextSnapshot.of({"messages": []})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version must be a non-negative int"):
        ContextSnapshot.of(AgentState(), version=-1)

    class Clashing(AgentState):
        message_count: int = 0

    with pytest.raises(TypeError, match="clashes with ContextSnapshot.message_count"):
        ContextSnapshot.of(Clashing())
