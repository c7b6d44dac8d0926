"""The classification coordinator, from hand-built snapshots only (no Ray)."""

from __future__ import annotations

import pytest
from tests.coordinators.builtin_fakes import snap, state_with

from coordinators import Message, reduce
from coordinators.builtin import ClassificationCoordinator, classify, extract_keywords


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where is `load_config` defined?", ["load_config"]),
        ("Who imports TransitionBatch and HTTPServer?", ["TransitionBatch", "HTTPServer"]),
        ("find usages of fooBar", ["fooBar"]),
        ("what calls parse_args or build_parser here", ["parse_args", "build_parser"]),
        ('explain the "retry policy" and \'backoff\'', ["retry policy", "backoff"]),
        ("trace coordinators.transitions, e.g. its imports", ["coordinators.transitions"]),
        ("why doesn't the orchestrator's apply roll back?", ["orchestrator", "apply", "roll"]),
    ],
)
def test_keyword_kinds(text: str, expected: list[str]) -> None:
    assert extract_keywords(text) == expected


def test_keywords_in_priority_order_deduplicated_and_capped() -> None:
    text = (
        "In `Engine`, does run_batch call \"Scheduler\" or pkg.jobs.queue and EventLoop? "
        "Scheduler, retries, timeouts, workers, leases, permits, tokens, engine"
    )
    assert extract_keywords(text) == [
        "Engine", "Scheduler", "EventLoop", "run_batch", "pkg.jobs.queue",
        "retries", "timeouts", "workers",
    ]


def test_stop_words_are_not_keywords() -> None:
    assert extract_keywords("Where is the thing that is defined in this file?") == []


@pytest.mark.parametrize(
    ("text", "task_type", "complexity"),
    [
        ("Where is `Widget` defined?", "locate_definition", "simple"),
        ("Who calls `flush_cache`?", "find_usages", "simple"),
        ("Which modules import `pkg.core`?", "trace_imports", "simple"),
        ("Where is `Widget` defined, and which modules import it?", "locate_definition", "moderate"),
        ("Explain how the scheduler retries work", "explain", "simple"),
        ("Explain the entire architecture, where every Handler is defined and who imports them",
         "locate_definition", "complex"),
        ("scheduler retries", "general", "simple"),
    ],
)
def test_task_type_and_complexity(text: str, task_type: str, complexity: str) -> None:
    task = classify(text)
    assert (task["type"], task["complexity"]) == (task_type, complexity)


async def test_process_writes_task_stage_trail_and_hands_off() -> None:
    state = state_with()
    result = await ClassificationCoordinator().process(snap(state), Message("user", "Where is `Widget` defined?"))
    assert result.handoff_to == "exploration" and result.should_continue
    after = reduce(state, result.transitions)
    assert after.conversation_stage == "exploring"
    assert after.conversation_state["task"]["keywords"] == ["Widget"]
    assert after.conversation_state["trail"] == [
        {"coordinator": "classification", "reasoning": "task is locate_definition (simple); keywords: Widget"}
    ]
    assert state.conversation_state == {"root": "/repo"}  # the input state is untouched
