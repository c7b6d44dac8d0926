"""One writer per run, enforced by the SQLite store: a claimed run refuses every other writer
(another process, or another store object) with ``RunLockedElsewhere`` naming the holder, and
a claim ends with its holder, however the holder ends (``close()``, SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cluster.storage import JournalEntry, RunInfo, RunLockedElsewhere, SqliteStore

REPO = Path(__file__).resolve().parents[2]


def _entry(version: int) -> JournalEntry:
    return JournalEntry(version=version, request_id=f"r{version}", kind="fn", payload=[], created_at=time.time())


def _new_run(path: Path, name: str) -> None:
    store = SqliteStore(path)
    try:
        store.create_run(RunInfo(name=name, state_type="T", created_at=time.time(), owner_token="t"), {})
    finally:
        store.close()


def test_a_claimed_run_refuses_other_writers_naming_the_holder_and_still_serves_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _new_run(path, "run")
    writer, other = SqliteStore(path), SqliteStore(path)
    try:
        writer.claim_writer("run", holder={"address": "10.0.0.1:6379"})
        writer.append("run", [_entry(1)]).result()
        refused = other.append("run", [_entry(2)]).exception()
        assert isinstance(refused, RunLockedElsewhere)
        assert refused.holder["address"] == "10.0.0.1:6379" and refused.holder["pid"] == os.getpid()
        assert "--address 10.0.0.1:6379" in str(refused)
        with pytest.raises(RunLockedElsewhere):
            other.update_run_metadata("run", {"status": "complete"})
        with pytest.raises(RunLockedElsewhere):
            other.claim_writer("run", holder={}, timeout=0.1)
        assert [e.version for e in other.load("run")[1]] == [1]  # reads never need the claim
        writer.release_writer("run")
        other.append("run", [_entry(2)]).result()  # nobody holds it now
    finally:
        writer.close()
        other.close()
    reopened = SqliteStore(path)
    try:
        assert [e.version for e in reopened.load("run")[1]] == [1, 2]
    finally:
        reopened.close()


def test_the_claim_of_a_sigkilled_holder_is_released_with_its_process(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _new_run(path, "run")
    holder = textwrap.dedent(
        f"""
        import sys, time
        from cluster.storage import SqliteStore
        store = SqliteStore({str(path)!r})
        store.claim_writer("run", holder={{"address": "elsewhere:1"}})
        print("CLAIMED", flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env)
    store = SqliteStore(path)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "CLAIMED"
        with pytest.raises(RunLockedElsewhere, match="elsewhere:1") as refused:
            store.claim_writer("run", holder={}, timeout=0.1)
        assert refused.value.holder["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        store.claim_writer("run", holder={}, timeout=0.1)  # the kernel dropped the dead holder's lock
        store.append("run", [_entry(1)]).result()
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()
