"""reduce: every effect, every error, all-or-nothing, copy-on-write, subclasses."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from coordinators import AgentState, Message, StateTransition, TransitionBatch, TransitionError, reduce


class _MyState(AgentState):
    budget: int = 10


def _base() -> AgentState:
    return AgentState(
        messages=[Message("user", "hi")],
        conversation_state={"plan": {"steps": [1]}},
        capabilities={"x": {"nested": [1]}},
    )


def _assert_untouched(state: AgentState, dumped: dict[str, Any], ids: dict[str, int]) -> None:
    assert state.model_dump() == dumped
    for name, ident in ids.items():
        assert id(getattr(state, name)) == ident


def _ids(state: AgentState) -> dict[str, int]:
    names = ("messages", "conversation_state", "session_state", "capabilities", "sessions", "pending_tool_calls")
    return {name: id(getattr(state, name)) for name in names}


def test_add_message_and_add_messages_append() -> None:
    state = _base()
    new = reduce(state, TransitionBatch().add_message(Message("assistant", "a")).add_messages(
        [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c", "metadata": {"k": 1}}]
    ))
    assert [m.content for m in new.messages] == ["hi", "a", "b", "c"]
    assert new.messages[3].metadata == {"k": 1}
    assert [m.content for m in state.messages] == ["hi"]


def test_update_and_delete_state_in_both_scopes() -> None:
    state = _base()
    batch = (
        TransitionBatch().create_session("s1").update_state("plan", {"steps": [1, 2]})
        .update_state("cursor", 3, scope="session").delete_state("plan")
    )
    new = reduce(state, batch)
    assert new.conversation_state == {} and new.session_state == {"cursor": 3}
    assert state.conversation_state == {"plan": {"steps": [1]}}
    again = reduce(new, TransitionBatch().delete_state("cursor", scope="session"))
    assert again.session_state == {}


def test_state_values_are_plain_mutable_copies() -> None:
    new = reduce(AgentState(), TransitionBatch().update_state("plan", {"steps": [1]}))
    new.conversation_state["plan"]["steps"].append(2)  # a state is mutable, not frozen
    assert type(new.conversation_state["plan"]) is dict


def test_session_scope_without_an_open_session_is_an_error() -> None:
    with pytest.raises(TransitionError, match=r"transition 0 \(update_state\) failed: scope 'session' needs an open session"):
        reduce(AgentState(), TransitionBatch().update_state("k", 1, scope="session"))
    with pytest.raises(TransitionError, match="scope 'session' needs an open session"):
        reduce(AgentState(), TransitionBatch().delete_state("k", scope="session"))


def test_delete_of_a_missing_key_is_an_error_with_index_and_reason() -> None:
    batch = TransitionBatch().update_stage("a").update_stage("b").delete_state("nope")
    with pytest.raises(TransitionError) as info:
        reduce(_base(), batch)
    error = info.value
    assert str(error) == "transition 2 (delete_state) failed: key 'nope' not in conversation_state"
    assert error.index == 2 and error.transition is batch.transitions[2]
    assert error.reason == "key 'nope' not in conversation_state"
    assert isinstance(error, ValueError)
    back = pickle.loads(pickle.dumps(error))
    assert (back.index, back.transition, back.reason, str(back)) == (2, error.transition, error.reason, str(error))


def test_create_session_opens_it_makes_it_current_and_clears_session_state() -> None:
    state = reduce(AgentState(), TransitionBatch().create_session("s1").update_state("k", 1, scope="session"))
    new = reduce(state, TransitionBatch().create_session("s2", {"who": "u"}))
    assert new.session_id == "s2" and new.session_state == {} and set(new.sessions) == {"s1", "s2"}
    assert new.sessions["s2"].metadata == {"who": "u"}
    assert state.session_state == {"k": 1}


def test_create_session_generates_an_id_when_absent() -> None:
    new = reduce(AgentState(), TransitionBatch().create_session())
    assert new.session_id and new.session_id in new.sessions


def test_opening_an_open_session_again_is_an_error() -> None:
    with pytest.raises(TransitionError, match=r"transition 1 \(create_session\) failed: session 's1' is already open"):
        reduce(AgentState(), TransitionBatch().create_session("s1").create_session("s1"))


def test_close_session_removes_it_and_resets_the_current_one() -> None:
    state = reduce(AgentState(), TransitionBatch().create_session("s1").create_session("s2")
                   .update_state("k", 1, scope="session"))
    other = reduce(state, TransitionBatch().close_session("s1"))
    assert set(other.sessions) == {"s2"} and other.session_id == "s2" and other.session_state == {"k": 1}
    current = reduce(state, TransitionBatch().close_session("s2"))
    assert set(current.sessions) == {"s1"} and current.session_id == "" and current.session_state == {}


def test_closing_an_unknown_session_is_an_error() -> None:
    with pytest.raises(TransitionError, match=r"transition 0 \(close_session\) failed: session 'nope' is not open"):
        reduce(AgentState(), TransitionBatch().close_session("nope"))


def test_execute_tool_then_tool_result_adds_a_tool_message() -> None:
    state = reduce(AgentState(), TransitionBatch().execute_tool("ls", {"path": "."}, call_id="c1")
                   .execute_tool("cat", {"f": "a"}, call_id="c2"))
    assert set(state.pending_tool_calls) == {"c1", "c2"}
    assert state.pending_tool_calls["c1"].tool_name == "ls" and state.pending_tool_calls["c1"].arguments == {"path": "."}
    done = reduce(state, TransitionBatch().tool_result("c1", {"b": 1, "a": [2]}).tool_result("c2", "boom", is_error=True))
    assert done.pending_tool_calls == {}
    first, second = done.messages
    assert first == Message("tool", json.dumps({"a": [2], "b": 1}), name="ls", tool_call_id="c1", metadata={"is_error": False})
    assert second == Message("tool", "boom", name="cat", tool_call_id="c2", metadata={"is_error": True})


def test_duplicate_pending_call_and_unknown_result_are_errors() -> None:
    with pytest.raises(TransitionError, match=r"transition 1 \(execute_tool\) failed: tool call 'c1' is already pending"):
        reduce(AgentState(), TransitionBatch().execute_tool("a", {}, call_id="c1").execute_tool("b", {}, call_id="c1"))
    with pytest.raises(TransitionError, match=r"transition 0 \(tool_result\) failed: no pending tool call 'c9'"):
        reduce(AgentState(), TransitionBatch().tool_result("c9", 1))


def test_update_capability_and_stage() -> None:
    new = reduce(AgentState(), TransitionBatch().update_capability("planning").update_capability("limits", {"n": [1]})
                 .update_stage("complete"))
    assert new.capabilities == {"planning": True, "limits": {"n": [1]}} and new.conversation_stage == "complete"


def test_later_transitions_see_earlier_effects() -> None:
    batch = TransitionBatch().update_state("k", 1).delete_state("k").execute_tool("t", {}, call_id="c").tool_result("c", 1)
    new = reduce(AgentState(), batch)
    assert new.conversation_state == {} and new.pending_tool_calls == {} and len(new.messages) == 1


def test_reduce_leaves_state_untouched_when_last_transition_fails() -> None:
    state = reduce(_base(), TransitionBatch().create_session("s1").update_state("c", [1], scope="session")
                   .execute_tool("t", {}, call_id="c0"))
    dumped, ids = state.model_dump(), _ids(state)
    nested = (state.conversation_state["plan"], state.capabilities["x"], state.session_state["c"])
    batch = (
        TransitionBatch().add_message(Message("assistant", "a")).update_state("plan", 2).delete_state("plan")
        .update_state("c", 9, scope="session").create_session("s2").execute_tool("t", {}, call_id="c1")
        .tool_result("c0", "ok").update_capability("x", False).update_stage("done").close_session("s1")
        .delete_state("never-there")
    )
    with pytest.raises(TransitionError) as info:
        reduce(state, batch)
    assert info.value.index == len(batch) - 1
    _assert_untouched(state, dumped, ids)
    assert (state.conversation_state["plan"], state.capabilities["x"], state.session_state["c"]) == nested
    assert state.conversation_state["plan"] is nested[0] and state.capabilities["x"] is nested[1]


def test_successful_reduce_never_mutates_its_input() -> None:
    state = _base()
    dumped, ids = state.model_dump(), _ids(state)
    reduce(state, TransitionBatch().add_message(Message("a", "b")).update_state("plan", 1).update_capability("x", 0))
    _assert_untouched(state, dumped, ids)


def test_copy_on_write_shares_untouched_fields_and_frozen_messages() -> None:
    state = AgentState(messages=[Message("user", str(i)) for i in range(1000)], conversation_state={"a": {"b": 1}})
    new = reduce(state, TransitionBatch().add_message(Message("user", "new")))
    assert new.messages is not state.messages and len(new.messages) == 1001
    assert all(a is b for a, b in zip(new.messages, state.messages))
    assert new.conversation_state is state.conversation_state  # untouched: shared
    touched = reduce(state, TransitionBatch().update_state("c", 1))
    assert touched.messages is state.messages
    assert touched.conversation_state["a"] is not state.conversation_state["a"]  # touched dicts are deep-copied


def test_subclass_and_its_fields_are_preserved() -> None:
    state = _MyState(budget=3)
    new = reduce(state, TransitionBatch().update_stage("x"))
    assert type(new) is _MyState and new.budget == 3 and new.conversation_stage == "x"


def test_reduce_accepts_an_iterable_of_transitions_and_an_empty_batch() -> None:
    transitions = [StateTransition("update_stage", {"stage": "a"}), StateTransition("update_capability", {"name": "n"})]
    new = reduce(AgentState(), iter(transitions))
    assert new.conversation_stage == "a" and new.capabilities == {"n": True}
    state = AgentState()
    same = reduce(state, TransitionBatch())
    assert same == state and same is not state


def test_reduce_rejects_non_states_and_non_transitions() -> None:
    with pytest.raises(TypeError, match="reduce expects an AgentState"):
        reduce({}, TransitionBatch())  # type: ignore[type-var]
    with pytest.raises(TypeError, match="item 0 of the batch is a dict"):
        reduce(AgentState(), [{"transition_type": "update_stage"}])  # type: ignore[list-item]
