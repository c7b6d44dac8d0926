"""StateTransition: per-type validation at creation, immutability, dumps and pickling."""

from __future__ import annotations

import pickle
import re
from typing import Any

import cloudpickle
import pytest

from coordinators import Message, StateTransition, TransitionType

VALID: list[tuple[str, dict[str, Any]]] = [
    ("add_message", {"message": {"role": "user", "content": "hi"}}),
    ("add_message", {"message": {"role": "tool", "content": "", "name": "t", "tool_call_id": "c", "metadata": {"a": 1}}}),
    ("add_messages", {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
    ("update_state", {"key": "plan", "value": {"steps": [1, 2]}}),
    ("update_state", {"key": "plan", "value": None, "scope": "session"}),
    ("delete_state", {"key": "plan"}),
    ("delete_state", {"key": "plan", "scope": "session"}),
    ("create_session", {}),
    ("create_session", {"session_id": "s1", "metadata": {"user": "u"}}),
    ("close_session", {"session_id": "s1"}),
    ("execute_tool", {"tool_name": "ls", "arguments": {"path": "."}}),
    ("execute_tool", {"tool_name": "ls", "arguments": {}, "call_id": "c1"}),
    ("tool_result", {"call_id": "c1", "output": ["a", "b"]}),
    ("tool_result", {"call_id": "c1", "output": "boom", "is_error": True}),
    ("update_capability", {"name": "planning"}),
    ("update_capability", {"name": "budget", "value": 3}),
    ("update_stage", {"stage": "complete"}),
]

INVALID: list[tuple[str, dict[str, Any], str]] = [
    # missing fields
    ("add_message", {}, "add_message: missing required field 'message'"),
    ("add_message", {"message": {"content": "x"}}, "add_message: missing required field 'message.role'"),
    ("add_messages", {}, "add_messages: missing required field 'messages'"),
    ("update_state", {"value": 1}, "update_state: missing required field 'key'"),
    ("update_state", {"key": "k"}, "update_state: missing required field 'value'"),
    ("delete_state", {}, "delete_state: missing required field 'key'"),
    ("close_session", {}, "close_session: missing required field 'session_id'"),
    ("execute_tool", {"arguments": {}}, "execute_tool: missing required field 'tool_name'"),
    ("execute_tool", {"tool_name": "t"}, "execute_tool: missing required field 'arguments'"),
    ("tool_result", {"output": 1}, "tool_result: missing required field 'call_id'"),
    ("tool_result", {"call_id": "c"}, "tool_result: missing required field 'output'"),
    ("update_capability", {}, "update_capability: missing required field 'name'"),
    ("update_stage", {}, "update_stage: missing required field 'stage'"),
    # wrong types
    ("add_message", {"message": "hi"}, "add_message: field 'message' must be a message mapping"),
    ("add_message", {"message": {"role": "", "content": "x"}}, "field 'message.role' must be a non-empty string, got ''"),
    ("add_message", {"message": {"role": "u", "content": 3}}, "field 'message.content' must be a string, got 3"),
    ("add_message", {"message": {"role": "u", "content": "", "name": 1}}, "field 'message.name' must be a string or None"),
    ("add_message", {"message": {"role": "u", "content": "", "metadata": []}}, "field 'message.metadata' must be a dict"),
    ("add_messages", {"messages": []}, "add_messages: field 'messages' must be a non-empty list of messages"),
    ("add_messages", {"messages": [{"role": "u", "content": "a"}, {"role": "u"}]}, "missing required field 'messages[1].content'"),
    ("update_state", {"key": "", "value": 1}, "update_state: field 'key' must be a non-empty string, got ''"),
    ("update_state", {"key": 3, "value": 1}, "update_state: field 'key' must be a non-empty string, got 3"),
    ("delete_state", {"key": None}, "delete_state: field 'key' must be a non-empty string, got None"),
    ("create_session", {"session_id": ""}, "create_session: field 'session_id' must be a non-empty string"),
    ("create_session", {"metadata": "m"}, "create_session: field 'metadata' must be a dict, got 'm'"),
    ("close_session", {"session_id": 5}, "close_session: field 'session_id' must be a non-empty string, got 5"),
    ("execute_tool", {"tool_name": "t", "arguments": [1]}, "execute_tool: field 'arguments' must be a dict, got a list"),
    ("execute_tool", {"tool_name": "", "arguments": {}}, "execute_tool: field 'tool_name' must be a non-empty string"),
    ("tool_result", {"call_id": "c", "output": 1, "is_error": "no"}, "tool_result: field 'is_error' must be a bool, got 'no'"),
    ("update_capability", {"name": ""}, "update_capability: field 'name' must be a non-empty string"),
    ("update_stage", {"stage": 1}, "update_stage: field 'stage' must be a non-empty string, got 1"),
    # unknown scope
    ("update_state", {"key": "k", "value": 1, "scope": "global"},
     "update_state: field 'scope' must be 'conversation' or 'session', got 'global'"),
    ("delete_state", {"key": "k", "scope": "Session"},
     "delete_state: field 'scope' must be 'conversation' or 'session', got 'Session'"),
    # non-JSON values
    ("update_state", {"key": "k", "value": {1, 2}}, "update_state: data.value: set is not JSON-clean"),
    ("update_state", {"key": "k", "value": float("nan")}, "update_state: data.value: float nan is not JSON-clean"),
    ("execute_tool", {"tool_name": "t", "arguments": {"x": object()}}, "execute_tool: data.arguments.x: object is not JSON-clean"),
    ("tool_result", {"call_id": "c", "output": [1, {2: "x"}]}, "tool_result: data.output[1]: key 2 is not a string"),
    ("update_capability", {"name": "n", "value": float("inf")}, "update_capability: data.value: float inf is not JSON-clean"),
    # unknown extra fields
    ("update_stage", {"stage": "s", "why": "x"}, "update_stage: unknown field 'why' (allowed: stage)"),
    ("update_state", {"key": "k", "value": 1, "a": 1, "b": 2}, "update_state: unknown fields 'a', 'b'"),
    ("add_message", {"message": {"role": "u", "content": "", "extra": 1}}, "unknown field 'message.extra'"),
    ("close_session", {"session_id": "s", "force": True}, "close_session: unknown field 'force'"),
]


@pytest.mark.parametrize(("kind", "data"), VALID)
def test_valid_transition_of_every_type_is_accepted(kind: str, data: dict[str, Any]) -> None:
    transition = StateTransition(kind, data)
    assert transition.transition_type is TransitionType(kind)
    for key, value in data.items():
        assert transition.data[key] == value


@pytest.mark.parametrize(("kind", "data", "message"), INVALID)
def test_invalid_transition_raises_value_error_naming_type_and_field(kind: str, data: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        StateTransition(kind, data)
    assert message in str(info.value)


def test_every_transition_type_has_a_valid_and_an_invalid_case() -> None:
    assert {kind for kind, _ in VALID} == {t.value for t in TransitionType}
    assert {kind for kind, _, _ in INVALID} == {t.value for t in TransitionType}


def test_all_problems_are_reported_in_one_message() -> None:
    with pytest.raises(ValueError) as info:
        StateTransition("update_state", {"scope": "global", "junk": 1})
    text = str(info.value)
    assert text.startswith("update_state: ")
    for part in ("missing required field 'key'", "missing required field 'value'", "field 'scope' must be", "unknown field 'junk'"):
        assert part in text


def test_unknown_transition_type_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown transition type 'bogus' \(expected one of: add_message, "):
        StateTransition("bogus", {})


def test_non_mapping_data_and_non_json_metadata_are_rejected() -> None:
    with pytest.raises(ValueError, match="update_stage: data must be a dict, got a list"):
        StateTransition("update_stage", ["x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="update_stage: metadata.when: object is not JSON-clean"):
        StateTransition("update_stage", {"stage": "s"}, {"when": object()})


def test_enum_and_string_types_and_positional_args_are_equivalent() -> None:
    a = StateTransition(TransitionType.UPDATE_STAGE, {"stage": "s"}, {"by": "x"})
    b = StateTransition(transition_type="update_stage", data={"stage": "s"}, metadata={"by": "x"})
    assert a == b and hash(a) == hash(b)


def test_defaults_are_stored_explicitly() -> None:
    assert StateTransition("update_state", {"key": "k", "value": 1}).data["scope"] == "conversation"
    assert StateTransition("delete_state", {"key": "k"}).data["scope"] == "conversation"
    assert StateTransition("tool_result", {"call_id": "c", "output": 1}).data["is_error"] is False
    assert StateTransition("update_capability", {"name": "n"}).data["value"] is True


def test_ids_are_generated_once_at_creation() -> None:
    session = StateTransition("create_session", {})
    assert len(session.data["session_id"]) == 32
    call = StateTransition("execute_tool", {"tool_name": "t", "arguments": {}})
    assert call.data["call_id"].startswith("call_") and len(call.data["call_id"]) == 21
    assert StateTransition.model_validate(call.model_dump(mode="json")) == call


def test_message_models_are_accepted_in_add_message_data() -> None:
    transition = StateTransition("add_message", {"message": Message("user", "hi", metadata={"a": 1})})
    assert transition.data["message"] == {"role": "user", "content": "hi", "metadata": {"a": 1}}


def test_data_is_deep_copied_and_frozen() -> None:
    arguments = {"paths": ["a"], "opts": {"deep": True}}
    transition = StateTransition("execute_tool", {"tool_name": "t", "arguments": arguments})
    arguments["paths"].append("b")
    assert transition.data["arguments"]["paths"] == ["a"]
    with pytest.raises(TypeError):
        transition.data["x"] = 1
    with pytest.raises(TypeError):
        transition.data["arguments"]["paths"].append("c")
    with pytest.raises(TypeError):
        transition.data["arguments"]["opts"]["deep"] = False
    with pytest.raises(TypeError):
        transition.metadata["x"] = 1
    with pytest.raises(ValueError):  # pydantic frozen model
        transition.data = {}  # type: ignore[misc]


def test_model_dump_is_plain_and_round_trips() -> None:
    transition = StateTransition("update_state", {"key": "k", "value": {"a": [1, {"b": 2}]}}, {"src": "t"})
    for mode in ("python", "json"):
        dumped = transition.model_dump(mode=mode)
        assert type(dumped["data"]) is dict and type(dumped["data"]["value"]["a"]) is list
        assert StateTransition.model_validate(dumped) == transition
    assert transition.model_dump(mode="json")["transition_type"] == "update_state"
    assert StateTransition.model_validate_json(transition.model_dump_json()) == transition


def test_model_validate_checks_data_too() -> None:
    with pytest.raises(ValueError, match="update_state: missing required field 'value'"):
        StateTransition.model_validate({"transition_type": "update_state", "data": {"key": "k"}})


def test_transition_pickles_and_cloudpickles() -> None:
    transition = StateTransition("execute_tool", {"tool_name": "t", "arguments": {"x": [1]}})
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(transition))
        assert back == transition
        with pytest.raises(TypeError):
            back.data["arguments"]["x"].append(2)


@pytest.mark.parametrize("value, where", [
    ("a\ud800b", "data.value"),
    ({"nested": ["ok", "\udfff"]}, "data.value.nested"),
    ({"key\ud800": 1}, "data.value"),
])
def test_a_value_holding_an_unpaired_surrogate_is_refused_naming_where(value: Any, where: str) -> None:
    # No store can journal such text: accepted here, it failed other runs' writes in the
    # same group commit.
    with pytest.raises(ValueError, match=rf"update_state.*{re.escape(where)}.*unpaired surrogate"):
        StateTransition(TransitionType.UPDATE_STATE, {"key": "k", "value": value})


def test_text_outside_ascii_is_accepted() -> None:
    assert StateTransition(TransitionType.UPDATE_STATE, {"key": "k", "value": "héllo ✓ 日本 🎉"}).data["value"] == "héllo ✓ 日本 🎉"
