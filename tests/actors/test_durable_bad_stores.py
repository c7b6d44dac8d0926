"""Bad stores through the orchestrator: a clear error naming the file, never an empty state.

Each case damages a store file in one way, then checks that ``Orchestrator(...)`` and/or
``Orchestrator.attach(...)`` raise the store's specific error with the file's path and the
problem in the message, and that the file is byte-for-byte untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import BaseModel

from actors import Orchestrator
from actors import AgentConfig, new_agent, to_stored_record
from cluster.storage import JournalGap, SchemaTooNew, SqliteStore, StoreCorrupted, StoreError
from coordinators import AgentState, TransitionBatch
from tests._waits import HANG_GUARD_S

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Counter(BaseModel):
    count: int = 0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _persisted_run(path: Path, name: str, applies: int = 5) -> None:
    """A closed run with ``applies`` journal entries (no checkpoints, so nothing compacted)."""
    orch = Orchestrator(Counter(), name=name, store=path, checkpoint_every=0)
    for _ in range(applies):
        await orch.apply(lambda s: setattr(s, "count", s.count + 1))
    await orch.close()


def _tamper(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


def test_a_file_that_is_not_a_database_fails_the_constructor_untouched(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator(Counter(), name="g", store=path)
    assert str(path) in str(info.value) and "not a SQLite database" in str(info.value)
    with pytest.raises(StoreCorrupted, match="not a SQLite database"):
        Orchestrator.attach("g", store=path)
    assert _digest(path) == before


async def test_a_truncated_file_fails_attach_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "trunc", applies=200)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator.attach("trunc", store=path)
    assert str(path) in str(info.value) and "corrupted" in str(info.value)
    with pytest.raises(StoreCorrupted):
        Orchestrator(Counter(), name="other", store=path)
    assert _digest(path) == before


async def test_a_journal_with_a_gap_fails_attach_naming_the_missing_version(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "gap")
    _tamper(path, "DELETE FROM journal WHERE run = 'gap' AND version = 3")
    before = _digest(path)
    with pytest.raises(JournalGap) as info:
        Orchestrator.attach("gap", store=path)
    assert str(path) in str(info.value) and "version 3 is missing" in str(info.value) and info.value.missing == 3
    assert _digest(path) == before


async def test_a_checkpoint_that_fails_validation_fails_attach(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "badstate")
    _tamper(path, """UPDATE checkpoints SET state = '{"count": "many"}' WHERE run = 'badstate'""")
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator.attach("badstate", store=path)
    assert str(path) in str(info.value) and "does not validate as Counter" in str(info.value)
    assert _digest(path) == before


async def test_a_journal_entry_that_does_not_replay_fails_attach(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(AgentState(), name="badentry", store=path, checkpoint_every=0)
    await orch.apply_batch(TransitionBatch().update_state("k", 1))
    await orch.apply_batch(TransitionBatch().update_state("k", 2))
    await orch.close()
    bad = json.dumps([{"transition_type": "update_state", "data": {"no_key": 1}, "metadata": {}}])
    _tamper(path, f"UPDATE journal SET payload = '{bad}' WHERE run = 'badentry' AND version = 2")
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator.attach("badentry", store=path)
    assert str(path) in str(info.value) and "journal entry 2" in str(info.value)
    assert _digest(path) == before


async def test_an_agent_record_that_fails_validation_fails_attach(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "badagent")
    record = to_stored_record(new_agent("sub:x:0", run="badagent", kind="subagent", config=AgentConfig(skill="x")))
    record.update(lifecycle="error", last_error=None)  # an error agent must say why
    store = SqliteStore(path)
    store.put_agent("badagent", "sub:x:0", record)
    store.close()
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator.attach("badagent", store=path)
    message = str(info.value)
    assert str(path) in message and "agent 'sub:x:0'" in message and "last_error" in message
    assert _digest(path) == before


async def test_a_store_from_a_newer_schema_fails_constructor_and_attach_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "future")
    _tamper(path, "PRAGMA user_version = 99")
    before = _digest(path)
    with pytest.raises(SchemaTooNew) as info:
        Orchestrator.attach("future", store=path)
    assert str(path) in str(info.value) and "schema version 99" in str(info.value)
    with pytest.raises(SchemaTooNew):
        Orchestrator(Counter(), name="fresh", store=path)
    assert _digest(path) == before


async def test_a_bad_journal_entry_fails_attach_even_when_later_entries_overwrite_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _persisted_run(path, "badmiddle")
    _tamper(path, """UPDATE journal SET payload = '{"set": {"count": "many"}}' WHERE run = 'badmiddle' AND version = 2""")
    before = _digest(path)
    with pytest.raises(StoreCorrupted) as info:
        Orchestrator.attach("badmiddle", store=path)
    assert str(path) in str(info.value) and "journal entry 2" in str(info.value) and "does not validate" in str(info.value)
    assert _digest(path) == before


async def test_a_store_read_failing_under_a_group_of_applies_fails_those_applies_and_the_next_ones_go_on(
    tmp_path: Path,
) -> None:
    """A run attached after a checkpoint looks older request ids up in its store; when that
    read fails, the queued ``apply(fn)`` calls get the store's error (they used to wait
    forever), nothing is applied for them, and the run writes again once the store reads."""
    path = tmp_path / "reads.db"
    orch = Orchestrator(Counter(), name="reads", store=path, checkpoint_every=2)
    for _ in range(3):
        await orch.apply(lambda s: setattr(s, "count", s.count + 1))
    await orch.close()
    orch = Orchestrator.attach("reads", store=path)  # request ids before the checkpoint: in the store only
    _tamper(path, "ALTER TABLE requests RENAME TO requests_away")
    calls = [orch.apply(lambda s: setattr(s, "count", s.count + 1)) for _ in range(5)]
    outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), HANG_GUARD_S)
    assert all(isinstance(o, StoreError) for o in outcomes), outcomes
    assert "requests" in str(outcomes[0]) and str(path) in str(outcomes[0])
    assert await orch.version() == 3 and (await orch.snapshot()).count == 3  # nothing applied for them

    _tamper(path, "ALTER TABLE requests_away RENAME TO requests")
    assert await asyncio.wait_for(orch.apply(lambda s: setattr(s, "count", s.count + 1)), HANG_GUARD_S) == 4
    await orch.close()
    again = Orchestrator.attach("reads", store=path)
    assert (await again.version(), (await again.snapshot()).count) == (4, 4)
    await again.close()
