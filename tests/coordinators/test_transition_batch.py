"""TransitionBatch: both builder styles, sealing, extend, iteration, serialisation."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest
from pydantic import BaseModel

from coordinators import Message, StateTransition, TransitionBatch, TransitionType


def _full(batch: TransitionBatch) -> TransitionBatch:
    return (
        batch.add_message(Message("user", "hi"))
        .add_messages([{"role": "assistant", "content": "a"}, Message("user", "b")])
        .update_state("plan", {"steps": [1]})
        .delete_state("old", scope="session")
        .execute_tool("ls", {"path": "."}, call_id="c1")
        .tool_result("c1", ["a"], is_error=False)
        .update_capability("planning")
        .update_stage("working")
        .create_session("s1", {"who": "u"})
        .close_session("s1")
    )


def test_chained_and_one_call_per_line_styles_build_the_same_batch() -> None:
    chained = _full(TransitionBatch())
    lines = TransitionBatch()
    lines.add_message(Message("user", "hi"))
    lines.add_messages([{"role": "assistant", "content": "a"}, Message("user", "b")])
    lines.update_state("plan", {"steps": [1]})
    lines.delete_state("old", scope="session")
    lines.execute_tool("ls", {"path": "."}, call_id="c1")
    lines.tool_result("c1", ["a"], is_error=False)
    lines.update_capability("planning")
    lines.update_stage("working")
    lines.create_session("s1", {"who": "u"})
    lines.close_session("s1")
    assert chained == lines and len(chained) == 10
    assert [t.transition_type for t in chained] == [
        TransitionType.ADD_MESSAGE, TransitionType.ADD_MESSAGES, TransitionType.UPDATE_STATE,
        TransitionType.DELETE_STATE, TransitionType.EXECUTE_TOOL, TransitionType.TOOL_RESULT,
        TransitionType.UPDATE_CAPABILITY, TransitionType.UPDATE_STAGE, TransitionType.CREATE_SESSION,
        TransitionType.CLOSE_SESSION,
    ]


def test_every_builder_method_returns_the_same_batch() -> None:
    batch = TransitionBatch()
    assert batch.update_stage("x") is batch
    assert batch.add(StateTransition("update_stage", {"stage": "y"})) is batch
    assert batch.extend([]) is batch


def test_builder_methods_validate_immediately() -> None:
    with pytest.raises(ValueError, match="update_state: field 'scope' must be 'conversation' or 'session', got 'global'"):
        TransitionBatch().update_state("k", 1, scope="global")
    with pytest.raises(ValueError, match="execute_tool: data.arguments.s: set is not JSON-clean"):
        TransitionBatch().execute_tool("t", {"s": {1}})


def test_generated_ids_are_filled_in_by_builder() -> None:
    batch = TransitionBatch().execute_tool("t", {}).create_session()
    assert batch.transitions[0].data["call_id"].startswith("call_")
    assert batch.transitions[1].data["session_id"]


def test_empty_len_iteration_and_transitions_snapshot() -> None:
    batch = TransitionBatch()
    assert batch.is_empty() and len(batch) == 0 and list(batch) == []
    batch.update_stage("a").update_stage("b")
    snapshot = batch.transitions
    batch.update_stage("c")
    assert isinstance(snapshot, tuple) and len(snapshot) == 2
    assert [t.data["stage"] for t in batch] == ["a", "b", "c"]
    assert not batch.is_empty()


def test_extend_accepts_batches_and_iterables_and_is_all_or_nothing() -> None:
    other = TransitionBatch(metadata={"src": "other"}).update_stage("x")
    batch = TransitionBatch().extend(other).extend([StateTransition("update_stage", {"stage": "y"})])
    assert [t.data["stage"] for t in batch] == ["x", "y"]
    assert batch.metadata == {}
    with pytest.raises(TypeError, match="item 1 is a str"):
        batch.extend([StateTransition("update_stage", {"stage": "z"}), "nope"])  # type: ignore[list-item]
    assert len(batch) == 2


def test_add_rejects_non_transitions() -> None:
    with pytest.raises(TypeError, match="expects a StateTransition"):
        TransitionBatch().add({"transition_type": "update_stage"})  # type: ignore[arg-type]


def test_sealed_copy_refuses_every_builder_method_and_is_independent() -> None:
    batch = TransitionBatch(metadata={"k": [1]}).update_stage("a")
    sealed = batch.copy(sealed=True)
    calls = [
        lambda b: b.add(StateTransition("update_stage", {"stage": "b"})),
        lambda b: b.extend([]),
        lambda b: b.add_message({"role": "u", "content": ""}),
        lambda b: b.add_messages([{"role": "u", "content": ""}]),
        lambda b: b.update_state("k", 1),
        lambda b: b.delete_state("k"),
        lambda b: b.execute_tool("t", {}),
        lambda b: b.tool_result("c", 1),
        lambda b: b.update_capability("n"),
        lambda b: b.update_stage("s"),
        lambda b: b.create_session(),
        lambda b: b.close_session("s"),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="this TransitionBatch is sealed"):
            call(sealed)
    with pytest.raises(TypeError):
        sealed.metadata["k"] = 2
    batch.update_stage("b")
    batch.metadata["k"].append(2)
    assert len(sealed) == 1 and sealed.metadata == {"k": [1]} and sealed.sealed
    editable = sealed.copy()
    editable.update_stage("c")
    assert len(editable) == 2 and not editable.sealed


def test_sealed_batches_hash_and_editable_ones_do_not() -> None:
    batch = TransitionBatch().update_stage("a")
    assert hash(batch.copy(sealed=True)) == hash(batch.copy(sealed=True))
    with pytest.raises(TypeError, match="unhashable"):
        hash(batch)


def test_equality_is_by_transitions_and_metadata() -> None:
    t = StateTransition("update_stage", {"stage": "a"})
    assert TransitionBatch([t]) == TransitionBatch([t]).copy(sealed=True)
    assert TransitionBatch([t]) != TransitionBatch([t], {"m": 1})
    assert TransitionBatch([t]) != TransitionBatch()


def test_metadata_must_be_json_clean() -> None:
    with pytest.raises(ValueError, match="metadata.s: set is not JSON-clean"):
        TransitionBatch(metadata={"s": {1}})


def test_batch_pickles_keeping_sealed_state() -> None:
    batch = _full(TransitionBatch(metadata={"m": 1}))
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        assert loads(dumps(batch)) == batch
        sealed = loads(dumps(batch.copy(sealed=True)))
        assert sealed.sealed and sealed == batch
        with pytest.raises(TypeError):
            sealed.update_stage("x")


def test_to_dict_and_from_dict_round_trip() -> None:
    batch = _full(TransitionBatch(metadata={"m": [1]}))
    raw = batch.to_dict()
    assert set(raw) == {"transitions", "metadata"} and raw["metadata"] == {"m": [1]}
    assert TransitionBatch.from_dict(raw) == batch
    with pytest.raises(ValueError, match="unknown field"):
        TransitionBatch.from_dict({"transitions": [], "extra": 1})


class _Holder(BaseModel):
    batch: TransitionBatch


def test_batch_is_usable_as_a_pydantic_field() -> None:
    batch = TransitionBatch(metadata={"m": 1}).update_state("k", [1])
    holder = _Holder(batch=batch)
    dumped = holder.model_dump(mode="json")
    assert dumped == {"batch": batch.to_dict()}
    assert _Holder.model_validate(dumped).batch == batch
    assert _Holder.model_validate_json(holder.model_dump_json()).batch == batch
    assert _Holder.model_dump(holder)["batch"]["transitions"][0]["data"]["value"] == [1]
