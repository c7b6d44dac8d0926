"""ManagedAgent: the lifecycle union, the one transition guard, and the pure projections.

No Ray: these are pure models and functions.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import TypeAdapter, ValidationError

from actors import ManagedAgent, to_payload, to_stored_record
from actors import (
    ALLOWED_TRANSITIONS,
    AgentConfig,
    ClosedAgent,
    ErrorAgent,
    IdleAgent,
    IllegalLifecycleTransition,
    InitializingAgent,
    RunningAgent,
    from_stored_record,
    new_agent,
    transition,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
LIFECYCLES = ["initializing", "idle", "running", "error", "closed"]
HANDLE = object()  # stands in for a live actor handle


def _agent(lifecycle: str, **extra: object) -> ManagedAgent:
    """An agent in ``lifecycle`` reached through the guard (the only way the runtime builds one)."""
    agent: ManagedAgent = new_agent(
        "sub:echo:0", run="run-1", kind="subagent",
        config=AgentConfig(skill="echo", replicas=2, slot=0, node="n1", extra={"tags": ["a", "b"]}), now=T0,
    )
    path = {"initializing": [], "idle": ["idle"], "running": ["idle", "running"], "error": ["error"], "closed": ["closed"]}
    for step in path[lifecycle]:
        agent = transition(agent, step, handle=HANDLE if step in ("idle", "running") else None,
                           last_error="boom" if step == "error" else None, now=T0 + timedelta(seconds=1))
    return agent.model_copy(update=extra) if extra else agent


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_stored_record_has_iso_timestamps_no_handle_and_round_trips(lifecycle: str) -> None:
    agent = _agent(lifecycle)
    record = to_stored_record(agent)
    assert record["lifecycle"] == lifecycle
    assert record["created_at"] == "2025-01-02T03:04:05+00:00"
    assert datetime.fromisoformat(record["updated_at"]) >= T0
    assert "handle" not in record and "live" not in record
    assert json.loads(json.dumps(record)) == record  # JSON-clean
    assert record["config"] == {"skill": "echo", "node": "n1", "replicas": 2, "slot": 0, "actor_name": None,
                                "num_cpus": None, "extra": {"tags": ["a", "b"]}}
    back = from_stored_record(record)
    assert back.lifecycle == lifecycle and getattr(back, "handle", None) is None
    assert to_stored_record(back) == record


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_payload_reports_liveness_instead_of_the_handle_and_hides_config_extra(lifecycle: str) -> None:
    agent = _agent(lifecycle)
    payload = to_payload(agent)
    assert payload["lifecycle"] == lifecycle
    assert payload["live"] is (lifecycle in ("idle", "running"))
    assert "handle" not in payload and "extra" not in payload["config"]
    assert payload["created_at"] == "2025-01-02T03:04:05+00:00"
    assert json.loads(json.dumps(payload)) == payload


def test_error_agent_requires_a_last_error_and_projections_carry_it() -> None:
    agent = _agent("error")
    assert to_stored_record(agent)["last_error"] == "boom" and to_payload(agent)["last_error"] == "boom"
    with pytest.raises(ValidationError, match="last_error"):
        ErrorAgent(agent_id="a", run="r", kind="subagent", created_at=T0, updated_at=T0)
    with pytest.raises(ValidationError):
        ErrorAgent(agent_id="a", run="r", kind="subagent", created_at=T0, updated_at=T0, last_error="")
    with pytest.raises(ValueError, match="needs last_error"):
        transition(_agent("idle"), "error")


def test_closed_and_initializing_agents_cannot_hold_a_live_handle() -> None:
    with pytest.raises(ValidationError, match="handle"):
        ClosedAgent(agent_id="a", run="r", kind="coordinator", created_at=T0, updated_at=T0, handle=HANDLE)
    with pytest.raises(ValidationError, match="handle"):
        InitializingAgent(agent_id="a", run="r", kind="coordinator", created_at=T0, updated_at=T0, handle=HANDLE)
    closed = transition(_agent("running"), "closed")
    assert isinstance(closed, ClosedAgent) and closed.handle is None


def test_optional_fields_default_to_none_in_both_projections() -> None:
    agent = new_agent("coordinator:triage", run="r", kind="coordinator", now=T0)
    record, payload = to_stored_record(agent), to_payload(agent)
    assert record["title"] is None and record["last_error"] is None and record["restarts"] == 0
    assert record["config"] == AgentConfig().model_dump(mode="json")
    assert payload["title"] is None and payload["config"]["skill"] is None and payload["live"] is False
    titled = new_agent("coordinator:triage", run="r", kind="coordinator", title="Triage", now=T0)
    assert to_payload(titled)["title"] == "Triage" == to_stored_record(titled)["title"]


def test_mutating_a_projection_never_touches_the_source_agent() -> None:
    agent = _agent("running")
    before = to_stored_record(agent)
    record, payload = to_stored_record(agent), to_payload(agent)
    record["config"]["extra"]["tags"].append("mutated")
    record["lifecycle"] = "closed"
    payload["config"]["skill"] = "other"
    assert agent.config.extra["tags"] == ["a", "b"] and agent.config.skill == "echo"
    assert to_stored_record(agent) == before
    assert to_stored_record(agent) is not to_stored_record(agent)


def test_agents_are_frozen() -> None:
    agent = _agent("idle")
    with pytest.raises(ValidationError):
        agent.lifecycle = "running"  # type: ignore[misc]


@pytest.mark.parametrize("current", LIFECYCLES)
@pytest.mark.parametrize("target", LIFECYCLES)
def test_transition_guard_allows_exactly_the_table_and_names_both_states(current: str, target: str) -> None:
    agent = _agent(current)
    if target in ALLOWED_TRANSITIONS[current]:
        moved = transition(agent, target, handle=HANDLE, last_error="why")  # type: ignore[arg-type]
        assert moved.lifecycle == target and agent.lifecycle == current
        assert moved.created_at == agent.created_at and moved.updated_at >= agent.updated_at
    else:
        with pytest.raises(IllegalLifecycleTransition) as info:
            transition(agent, target, handle=HANDLE, last_error="why")  # type: ignore[arg-type]
        assert f"from {current!r} to {target!r}" in str(info.value)
        assert info.value.current == current and info.value.target == target


def test_closed_is_terminal_and_reinitializing_counts_a_restart() -> None:
    assert ALLOWED_TRANSITIONS["closed"] == frozenset()
    restarted = transition(_agent("error"), "initializing")
    assert restarted.restarts == 1 and restarted.handle is None
    idle = transition(restarted, "idle", handle=HANDLE)
    assert isinstance(idle, IdleAgent) and idle.handle is HANDLE
    running = transition(idle, "running")
    assert isinstance(running, RunningAgent) and running.handle is HANDLE  # kept across steps


def test_union_discriminates_on_lifecycle_and_rejects_unknown_ones() -> None:
    adapter = TypeAdapter(ManagedAgent)
    base = {"agent_id": "a", "run": "r", "kind": "subagent", "created_at": T0, "updated_at": T0}
    assert isinstance(adapter.validate_python({**base, "lifecycle": "idle"}), IdleAgent)
    with pytest.raises(ValidationError, match="lifecycle"):
        adapter.validate_python({**base, "lifecycle": "sleeping"})
    with pytest.raises(ValidationError, match="kind"):
        adapter.validate_python({**base, "lifecycle": "idle", "kind": "robot"})


def test_stored_record_that_does_not_validate_is_rejected() -> None:
    record = to_stored_record(_agent("error"))
    with pytest.raises(ValidationError, match="last_error"):
        from_stored_record({**record, "last_error": None})
    with pytest.raises(ValidationError, match="record_version"):
        from_stored_record({**record, "record_version": 2})
    with pytest.raises(ValidationError, match="created_at"):
        from_stored_record({**record, "created_at": "yesterday"})
