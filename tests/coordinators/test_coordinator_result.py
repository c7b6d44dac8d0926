"""CoordinatorResult: own sealed copy, factories, bounds, dumps and pickling."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from coordinators import CoordinatorResult, StateTransition, TransitionBatch


def test_result_keeps_its_own_sealed_copy_of_the_batch() -> None:
    batch = TransitionBatch().update_stage("a")
    result = CoordinatorResult(batch, reasoning="why")
    batch.update_stage("b")
    assert len(result.transitions) == 1 and result.transitions is not batch
    assert result.transitions.sealed
    with pytest.raises(TypeError, match="sealed"):
        result.transitions.update_stage("c")


def test_result_accepts_an_iterable_of_transitions_and_none() -> None:
    t = StateTransition("update_stage", {"stage": "a"})
    assert list(CoordinatorResult([t]).transitions) == [t]
    assert CoordinatorResult((x for x in [t])).transitions == TransitionBatch([t])
    assert CoordinatorResult().transitions.is_empty()
    with pytest.raises(ValueError, match=r"transitions\[0\] must be a StateTransition, got int"):
        CoordinatorResult([1])  # type: ignore[list-item]


def test_defaults() -> None:
    result = CoordinatorResult()
    assert (result.reasoning, result.confidence, result.metadata, result.should_continue, result.handoff_to) == (
        None, 1.0, {}, True, None,
    )


def test_no_op_and_transitions_only_factories() -> None:
    no_op = CoordinatorResult.no_op(reasoning="nothing", should_continue=False)
    assert no_op.transitions.is_empty() and no_op.reasoning == "nothing" and not no_op.should_continue
    a = StateTransition("update_stage", {"stage": "a"})
    b = StateTransition("update_capability", {"name": "x"})
    only = CoordinatorResult.transitions_only(a, b, reasoning="two", confidence=0.5)
    assert list(only.transitions) == [a, b] and only.reasoning == "two" and only.confidence == 0.5
    assert only.transitions.sealed


@pytest.mark.parametrize("confidence", [-0.01, 1.01, float("nan"), float("inf")])
def test_confidence_outside_unit_interval_is_rejected(confidence: float) -> None:
    with pytest.raises(ValueError, match=r"confidence must be within \[0, 1\]"):
        CoordinatorResult(confidence=confidence)


@pytest.mark.parametrize("confidence", [0, 0.0, 0.5, 1])
def test_confidence_bounds_are_inclusive(confidence: float) -> None:
    assert CoordinatorResult(confidence=confidence).confidence == confidence


def test_handoff_to_must_be_none_or_a_name() -> None:
    assert CoordinatorResult(handoff_to="planner").handoff_to == "planner"
    with pytest.raises(ValueError, match="handoff_to must be None or a non-empty coordinator name"):
        CoordinatorResult(handoff_to="")


def test_result_is_frozen_and_metadata_deeply_immutable() -> None:
    result = CoordinatorResult(metadata={"scores": [1, 2]})
    with pytest.raises(ValueError):
        result.reasoning = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.metadata["scores"].append(3)
    with pytest.raises(ValueError, match="metadata.s: set is not JSON-clean"):
        CoordinatorResult(metadata={"s": {1}})


def test_result_pickles_and_round_trips_through_json() -> None:
    result = CoordinatorResult(
        TransitionBatch(metadata={"m": 1}).update_state("k", [1]).execute_tool("t", {"a": 1}),
        reasoning="r", confidence=0.3, metadata={"x": 1}, should_continue=False, handoff_to="next",
    )
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(result))
        assert back == result and back.transitions.sealed
    assert CoordinatorResult.model_validate(result.model_dump(mode="json")) == result
    assert CoordinatorResult.model_validate_json(result.model_dump_json()) == result
    assert hash(result) == hash(pickle.loads(pickle.dumps(result)))
