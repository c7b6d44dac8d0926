"""State diffs: exact round trips, tiny appends, JSON-strict equality."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.storage import apply_diff, diff_states

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=30,
)
_objects = st.dictionaries(st.text(max_size=5), _json, max_size=6)


@given(old=_objects, new=_objects)
@settings(max_examples=200, deadline=None)
def test_apply_diff_of_diff_states_rebuilds_new_for_any_json(old: dict[str, Any], new: dict[str, Any]) -> None:
    before = copy.deepcopy(old)
    assert apply_diff(old, diff_states(old, new)) == new
    assert old == before


@given(old=_objects, tail=st.lists(_json, min_size=1, max_size=4))
@settings(max_examples=100, deadline=None)
def test_extending_a_list_is_stored_as_an_append_of_the_tail(old: dict[str, Any], tail: list[Any]) -> None:
    old = {**old, "items": [1, 2]}
    new = {**old, "items": [1, 2, *tail]}
    assert diff_states(old, new) == {"append": {"items": tail}}
    assert apply_diff(old, diff_states(old, new)) == new


def test_equal_states_give_an_empty_diff() -> None:
    state = {"a": [1, {"b": 2}], "c": {"d": None}}
    assert diff_states(state, copy.deepcopy(state)) == {}


def test_numbers_and_booleans_of_different_json_type_are_a_change() -> None:
    old = {"flag": 1, "ratio": 1, "nested": {"x": [0]}}
    new = {"flag": True, "ratio": 1.0, "nested": {"x": [False]}}
    diff = diff_states(old, new)
    rebuilt = apply_diff(old, diff)
    assert rebuilt == new
    assert type(rebuilt["flag"]) is bool and type(rebuilt["ratio"]) is float
    assert type(rebuilt["nested"]["x"][0]) is bool


def test_nested_objects_recurse_with_set_and_delete() -> None:
    old = {"conversation_state": {"keep": 1, "drop": 2, "change": 3}, "stage": "initial"}
    new = {"conversation_state": {"keep": 1, "change": 4, "add": 5}, "stage": "initial"}
    assert diff_states(old, new) == {"patch": {"conversation_state": {"set": {"change": 4, "add": 5}, "delete": ["drop"]}}}


def test_removed_and_shortened_fields_are_deleted_or_replaced() -> None:
    old = {"gone": 1, "items": [1, 2, 3]}
    new = {"items": [1, 2]}
    assert diff_states(old, new) == {"set": {"items": [1, 2]}, "delete": ["gone"]}


def test_one_message_appended_to_100k_messages_gives_a_tiny_fast_diff() -> None:
    messages = [{"role": "user", "content": f"message {i}", "name": None, "metadata": {"i": i}} for i in range(100_000)]
    old = {"messages": messages, "session_id": "s", "max_tokens": 4096}
    new = copy.deepcopy(old)
    new["messages"].append({"role": "assistant", "content": "hi", "name": None, "metadata": {}})
    # CPU time of this thread, not wall time: what other processes of a busy machine do is not counted.
    started = time.thread_time()
    diff = diff_states(old, new)
    cpu = time.thread_time() - started
    print(f"diff_states on 100k messages + 1: {cpu * 1000:.1f} ms of CPU")
    assert diff == {"append": {"messages": [new["messages"][-1]]}}
    assert len(repr(diff)) < 200
    assert cpu < 1.0


@pytest.mark.parametrize(
    ("old", "diff", "problem"),
    [
        ({"a": 1}, {"bogus": {}}, "unknown sections"),
        ({"a": 1}, {"append": {"a": [2]}}, "not a list"),
        ({"a": 1}, {"patch": {"a": {"set": {}}}}, "not an object"),
        ({"a": 1}, {"delete": ["b"]}, "not present"),
    ],
)
def test_a_diff_that_does_not_fit_the_state_raises_value_error(
    old: dict[str, Any], diff: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        apply_diff(old, diff)


def test_diff_states_rejects_non_dicts() -> None:
    with pytest.raises(TypeError, match="two dicts"):
        diff_states([], {})  # type: ignore[arg-type]
