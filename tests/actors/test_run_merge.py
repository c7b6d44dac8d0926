"""Merging several coordinators' results on one snapshot (pure: no Ray)."""

from __future__ import annotations

import asyncio

import pytest

from actors import MergeConflict, MergedCoordinator, ask_approval, merge_results
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch, reduce


def _result(batch: TransitionBatch, **kw) -> CoordinatorResult:
    return CoordinatorResult(transitions=batch, **kw)


def test_disjoint_results_merge_in_priority_order_with_combined_routing() -> None:
    merged = merge_results({
        "a": _result(TransitionBatch().update_state("x", 1).add_message({"role": "assistant", "content": "from a"}),
                     reasoning="a did x", confidence=0.9),
        "b": _result(TransitionBatch().update_state("y", 2).add_message({"role": "assistant", "content": "from b"}),
                     reasoning="b did y", confidence=0.6, handoff_to="c"),
    })
    state = reduce(AgentState(), merged.transitions)
    assert state.conversation_state == {"x": 1, "y": 2}
    assert [m.content for m in state.messages] == ["from a", "from b"]
    assert (merged.confidence, merged.handoff_to, merged.should_continue) == (0.6, "c", True)
    assert merged.reasoning == "a: a did x; b: b did y"
    assert merged.metadata["merged_from"] == ["a", "b"] and merged.metadata["merge_conflicts"] == []


def test_conflicting_writes_keep_the_earlier_result_and_report_the_dropped_one() -> None:
    merged = merge_results([
        ("first", _result(TransitionBatch().update_state("k", "first").update_stage("reading"))),
        ("second", _result(TransitionBatch().update_state("k", "second").update_stage("reading"), should_continue=False)),
    ])
    state = reduce(AgentState(), merged.transitions)
    assert state.conversation_state == {"k": "first"} and state.conversation_stage == "reading"
    assert merged.metadata["merge_conflicts"] == [
        {"target": ["state", "conversation", "k"], "kept": "first", "dropped": "second"}]
    assert merged.should_continue is False  # any member may stop the run


def test_on_conflict_error_names_both_coordinators_and_the_key() -> None:
    with pytest.raises(MergeConflict, match="'first' and 'second' both write state/conversation/k differently"):
        merge_results([("first", _result(TransitionBatch().update_state("k", 1))),
                       ("second", _result(TransitionBatch().update_state("k", 2)))], on_conflict="error")


def test_approval_requests_of_every_member_are_kept() -> None:
    one = ask_approval(_result(TransitionBatch().execute_tool("t", {}, call_id="c1")), "ok c1?")
    two = ask_approval(_result(TransitionBatch().execute_tool("t", {}, call_id="c2")), "ok c2?")
    merged = merge_results({"one": one, "two": two})
    questions = [r["question"] for r in merged.metadata["soloist.approval"]]
    assert questions == ["ok c1?", "ok c2?"]


class _Writes:
    def __init__(self, name: str, key: str) -> None:
        self.name, self.key = name, key

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return _result(TransitionBatch().update_state(self.key, f"{self.name} saw v{snapshot.version}"))


def test_a_merged_coordinator_runs_its_members_on_the_same_snapshot() -> None:
    nested = MergedCoordinator("team", [_Writes("a", "left"), _Writes("b", "right")])
    result = asyncio.run(nested.process(ContextSnapshot.of(AgentState(), version=7), "go"))
    assert reduce(AgentState(), result.transitions).conversation_state == {"left": "a saw v7", "right": "b saw v7"}


def test_bad_merge_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge_results({})
    with pytest.raises(ValueError, match="on_conflict"):
        merge_results({"a": _result(TransitionBatch())}, on_conflict="last")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'a' gave a dict"):
        merge_results({"a": {}})  # type: ignore[dict-item]
