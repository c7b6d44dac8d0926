"""One writer per run, enforced by the SQL stores (an OS lock beside a SQLite file, an advisory
lock on a PostgreSQL server): a claimed run refuses every other writer (another process, or
another store object) with ``RunLockedElsewhere`` naming the holder, and a claim ends with its
holder, however the holder ends (``close()``, SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cluster.storage import JournalEntry, RunInfo, RunLockedElsewhere
from tests._stores import StoreLocation

REPO = Path(__file__).resolve().parents[2]


def _entry(version: int) -> JournalEntry:
    return JournalEntry(version=version, request_id=f"r{version}", kind="fn", payload=[], created_at=time.time())


def _new_run(where: StoreLocation, name: str) -> None:
    store = where.open()
    store.create_run(RunInfo(name=name, state_type="T", created_at=time.time(), owner_token="t"), {})
    store.close()


def test_a_claimed_run_refuses_other_writers_naming_the_holder_and_still_serves_reads(store_location: StoreLocation) -> None:
    _new_run(store_location, "run")
    writer, other = store_location.open(), store_location.open()
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
    reopened = store_location.open()
    assert [e.version for e in reopened.load("run")[1]] == [1, 2]


def test_the_claim_of_a_sigkilled_holder_is_released_with_its_process(store_location: StoreLocation) -> None:
    _new_run(store_location, "run")
    holder = textwrap.dedent(
        f"""
        import sys, time
        from cluster.storage import open_store
        store = open_store({store_location.location!r})
        store.claim_writer("run", holder={{"address": "elsewhere:1"}})
        print("CLAIMED", flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env)
    store = store_location.open()
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "CLAIMED"
        with pytest.raises(RunLockedElsewhere, match="elsewhere:1") as refused:
            store.claim_writer("run", holder={}, timeout=0.1)
        assert refused.value.holder["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        store.claim_writer("run", holder={}, timeout=60)  # the kernel (or the server, once it sees the socket close) drops the dead holder's lock
        store.append("run", [_entry(1)]).result()
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()
