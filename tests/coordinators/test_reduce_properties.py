"""Property: any sequence of valid transitions applies fully or not at all."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinators import AgentState, Message, StateTransition, TransitionError, reduce

_KEYS = st.sampled_from(["a", "b", "c"])
_IDS = st.sampled_from(["x", "y"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4,
)
_SCOPES = st.sampled_from(["conversation", "session"])

_TRANSITIONS = st.one_of(
    st.builds(lambda c: StateTransition("add_message", {"message": {"role": "user", "content": c}}), st.text(max_size=3)),
    st.builds(lambda k, v, s: StateTransition("update_state", {"key": k, "value": v, "scope": s}), _KEYS, _JSON, _SCOPES),
    st.builds(lambda k, s: StateTransition("delete_state", {"key": k, "scope": s}), _KEYS, _SCOPES),
    st.builds(lambda i: StateTransition("create_session", {"session_id": i}), _IDS),
    st.builds(lambda i: StateTransition("close_session", {"session_id": i}), _IDS),
    st.builds(lambda i: StateTransition("execute_tool", {"tool_name": "t", "arguments": {}, "call_id": i}), _IDS),
    st.builds(lambda i, o: StateTransition("tool_result", {"call_id": i, "output": o}), _IDS, _JSON),
    st.builds(lambda n, v: StateTransition("update_capability", {"name": n, "value": v}), _KEYS, _JSON),
    st.builds(lambda s: StateTransition("update_stage", {"stage": s}), st.sampled_from(["initial", "complete"])),
)

_START = reduce(
    AgentState(messages=[Message("user", "hi")], conversation_state={"a": {"n": [1]}}),
    [StateTransition("create_session", {"session_id": "x"}), StateTransition("update_state", {"key": "b", "value": 1, "scope": "session"})],
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TRANSITIONS, max_size=8))
def test_valid_transitions_apply_fully_or_raise_with_input_unchanged(transitions: list[StateTransition]) -> None:
    state = _START
    before = state.model_dump()
    nested_ids = {name: id(getattr(state, name)) for name in ("messages", "conversation_state", "session_state")}
    try:
        new = reduce(state, transitions)
    except TransitionError as error:
        assert 0 <= error.index < len(transitions) and error.transition is transitions[error.index]
        # every prefix before the failing transition applies on its own
        reduce(state, transitions[: error.index])
    else:
        # applying one at a time gives the same result as the whole batch
        step = state
        for transition in transitions:
            step = reduce(step, [transition])
        assert step.model_dump() == new.model_dump()
    assert state.model_dump() == before
    assert {name: id(getattr(state, name)) for name in nested_ids} == nested_ids
