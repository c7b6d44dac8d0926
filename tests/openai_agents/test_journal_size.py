"""The journal grows with what is new: a step stores its delta, never the conversation.

A conversation of ``LONG_REQUESTS`` model requests (responses of 4,000 to 12,000 characters,
each but the last also calling a tool) runs durably on a SQLite store against the test's
server; the store is then measured from outside with ``sqlite3``: the run's journal rows and
checkpoints, and the file itself, stay under twice the conversation's own text, and a late
step's row is no bigger than an early one of the same length (a step that carried the
conversation would grow with it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from actors.openai_agents import SoloistRunner
from tests.openai_agents._agents import LONG_REQUESTS, LONG_TEXTS, QUIET, conversation_text, factory, scribe, script
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def _store_bytes(store: Path) -> int:
    """The store file's size once its write-ahead log is folded into it."""
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store.stat().st_size


async def test_a_long_conversation_keeps_its_store_under_twice_its_text(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    with CountingServer(script) as server:
        runner = SoloistRunner(store=str(store), model_factory=factory(server.base_url))
        result = await runner.run(scribe(), "long talk", context=str(tmp_path / "ledger.log"), run_id="long-1",
                                  run_config=QUIET, max_turns=LONG_REQUESTS + 1)
        assert sum(server.counts.values()) == LONG_REQUESTS
    text = conversation_text(result.to_input_list())
    name = runner.run_name("long-1")

    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = [length for (length,) in db.execute(
            "SELECT length(payload) FROM journal WHERE run = ? ORDER BY version", (name,))]
        (checkpoints,) = db.execute("SELECT coalesce(sum(length(state)), 0) FROM checkpoints WHERE run = ?",
                                    (name,)).fetchone()
    journal = sum(rows)
    stored_file = _store_bytes(store)
    print(f"conversation text {text} chars; journal {journal} B in {len(rows)} rows, checkpoints {checkpoints} B, "
          f"store file {stored_file} B: {(journal + checkpoints) / text:.2f}x / {stored_file / text:.2f}x the text")
    assert len(rows) == 2 * LONG_REQUESTS - 1  # a row per step: each model request and each tool call
    assert journal + checkpoints < 2 * text
    assert stored_file < 2 * text
    model_rows = rows[0::2]  # model, tool, model, tool, ..., model
    first, late = model_rows[:len(LONG_TEXTS)], model_rows[90:90 + len(LONG_TEXTS)]
    assert all(b <= a * 1.05 for a, b in zip(first, late)), f"later steps' rows grew with the conversation: {first} -> {late}"
