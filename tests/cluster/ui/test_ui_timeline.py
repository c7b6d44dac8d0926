"""Timeline entries stay small whatever a version holds, and carry the coordinator's reasoning."""

from __future__ import annotations

import json

from actors import Change
from cluster.cli.ui import (
    MAX_DATA_CHARS,
    MAX_TRANSITIONS,
    entry_from_change,
    entry_from_journal,
    reasoning_trail,
    run_status,
)
from coordinators import TransitionBatch


def test_a_big_version_is_cut_to_a_bounded_entry_that_says_so() -> None:
    batch = TransitionBatch()
    for i in range(MAX_TRANSITIONS + 3):
        batch.update_state(f"k{i}", "x" * 10_000)
    entry = entry_from_change(Change(seq=1, version=7, kind="batch", transitions=tuple(batch), at=1.0))
    assert entry.version == 7 and len(entry.transitions) == MAX_TRANSITIONS and entry.more_transitions == 3
    assert all(t.cut and len(t.data) == MAX_DATA_CHARS + 1 for t in entry.transitions)
    assert len(entry.model_dump_json()) < 3_000


def test_the_reasoning_a_coordinator_appends_to_the_trail_labels_its_version() -> None:
    trail = [{"coordinator": "exploration", "reasoning": "search first", "confidence": 0.7},
             {"coordinator": "safety", "reasoning": "all calls vetted"}]
    batch = TransitionBatch().update_state("trail", trail).update_stage("reading")
    entry = entry_from_change(Change(seq=1, version=3, kind="batch", transitions=tuple(batch), at=1.0))
    assert (entry.coordinator, entry.reasoning) == ("safety", "all calls vetted")
    state = {"conversation_state": {"trail": trail, "soloist.run": {"status": "waiting"}}}
    assert [t["coordinator"] for t in reasoning_trail(state)] == ["exploration", "safety"]
    assert reasoning_trail(state)[0]["confidence"] == 0.7
    assert run_status(state) == "waiting" and run_status({}) is None and reasoning_trail(None) == []


def test_an_fn_change_shows_its_state_diff() -> None:
    entry = entry_from_change(Change(seq=1, version=2, kind="fn", transitions=None, at=1.0, diff={"set": {"a": 1}}))
    assert [(t.type, json.loads(t.data)) for t in entry.transitions] == [("state_diff", {"set": {"a": 1}})]
    stored = entry_from_journal(2, "fn", {"set": {"a": 1}}, 1.0)
    assert stored.transitions == entry.transitions
