"""Message, Session, PendingToolCall and AgentState models."""

from __future__ import annotations

import pickle

import pytest

from coordinators import AgentState, Message, PendingToolCall, Session


def test_message_accepts_positional_role_and_content_and_freezes_metadata() -> None:
    message = Message("user", "hi", metadata={"tags": ["a"]})
    assert (message.role, message.content, message.name, message.tool_call_id) == ("user", "hi", None, None)
    with pytest.raises(TypeError):
        message.metadata["tags"].append("b")
    with pytest.raises(ValueError):
        message.content = "x"  # type: ignore[misc]


def test_message_role_must_not_be_empty() -> None:
    with pytest.raises(ValueError, match="Message.role must be a non-empty string"):
        Message("", "x")


def test_message_pickles_to_an_equal_frozen_message() -> None:
    message = Message("tool", "out", name="ls", tool_call_id="c1", metadata={"is_error": False})
    back = pickle.loads(pickle.dumps(message))
    assert back == message and hash(back) == hash(message)
    assert Message.model_validate(message.model_dump(mode="json")) == message


def test_session_and_pending_tool_call_are_frozen_records() -> None:
    session = Session("s1", {"who": "u"})
    call = PendingToolCall("c1", "ls", {"path": "."})
    with pytest.raises(TypeError):
        call.arguments["path"] = "/"
    with pytest.raises(ValueError):
        session.session_id = "s2"  # type: ignore[misc]
    with pytest.raises(ValueError, match="Session.session_id must be a non-empty string"):
        Session("")
    assert pickle.loads(pickle.dumps(call)) == call


def test_agent_state_defaults_and_mutability() -> None:
    state = AgentState()
    assert state.messages == [] and state.session_id == "" and state.conversation_stage == "initial"
    assert (state.max_tokens, state.temperature) == (4096, 0.7)
    assert state.sessions == {} and state.pending_tool_calls == {}
    state.conversation_state["k"] = 1
    state.messages.append(Message("user", "x"))
    assert AgentState().conversation_state == {}


def test_agent_state_validates_messages_from_dicts() -> None:
    state = AgentState(messages=[{"role": "user", "content": "hi", "metadata": {"a": 1}}])
    assert isinstance(state.messages[0], Message)
    assert AgentState.model_validate(state.model_dump(mode="json")) == state
