"""A crash in the middle of a parallel batch: a call whose body finished never runs again.

The run's first turn hands off four calls at once: two fast ones and two that block until the
test releases them. Each result is committed the moment it returns, so once the fast results
are in the committed state the driver is SIGKILLed; a fresh process restores and resumes the
run. Every skill body appends its call id to an fsynced ledger from its own process: the
counts prove that the fast bodies ran exactly once and that only the calls still in flight
at the crash ran again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray

from actors import Orchestrator, Run
from tests._waits import eventually
from tests.actors.batch_fixtures import FAST, SLOW, ledger_counts

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]


def _start_driver(store: Path, name: str, ledger: Path, release: Path, tmp: Path) -> subprocess.Popen[str]:
    """The driver, joined to this test's Ray, once its run's orchestrator is up."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    errors = tmp / "driver.stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "actors" / "_run_batch_driver.py"), address, str(store), name,
             str(ledger), str(release)],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "STARTED", f"the driver did not start its run: {line!r}; its stderr ends:\n{errors.read_text()[-3000:]}"
    return proc


async def _pending(orch: Orchestrator[Any]) -> list[str]:
    return sorted((await orch.context()).pending_tool_calls)


async def test_a_call_that_finished_before_a_crash_mid_batch_never_runs_again(tmp_path: Path) -> None:
    store, ledger, release = tmp_path / "runs.sqlite", tmp_path / "ledger.log", tmp_path / "release"
    name = "batch-crash"
    proc = _start_driver(store, name, ledger, release, tmp_path)
    try:
        # Every body of the batch has started (the slow ones now block on the release file)...
        await eventually(lambda: asyncio.to_thread(ledger_counts, ledger),
                         lambda seen: all(seen.get(c) == 1 for c in FAST + SLOW), "all four bodies to start")
        # ...and the fast results are committed while the slow calls are still pending.
        watcher = Orchestrator.attach(name)  # read-only: the driver owns the run
        await eventually(lambda: _pending(watcher), lambda pending: pending == sorted(SLOW),
                         "the fast calls' results to be committed while the slow calls still run (pending calls)")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    await eventually(lambda: asyncio.to_thread(Orchestrator.list_live), lambda live: name not in live,
                     "the dead driver's run actor to end")
    assert ledger_counts(ledger) == {c: 1 for c in FAST + SLOW}

    orch = Orchestrator.attach(name, store=str(store))
    try:
        run = await Run.restore(orch)
        resumed = asyncio.ensure_future(run.resume())
        # The resumed run hands off only what was still pending: the slow calls run again.
        await eventually(lambda: asyncio.to_thread(ledger_counts, ledger),
                         lambda seen: all(seen.get(c) == 2 for c in SLOW) or resumed.done(), "the slow calls to run again")
        release.touch()
        outcome = await resumed
        assert outcome.status == "complete", outcome.reason
        seen = ledger_counts(ledger)
        assert {c: seen.get(c) for c in FAST} == {c: 1 for c in FAST}, f"a finished call ran again after the crash: {seen}"
        assert all(seen.get(c, 0) >= 2 for c in SLOW), f"calls in flight at the crash run again (at least once): {seen}"
        assert outcome.handoffs == 4 and outcome.handoff_errors == 0 and outcome.pending_calls == 0
        assert sorted(json.loads(o)["call"] for o in outcome.state["outputs"]) == sorted(FAST + SLOW)
    finally:
        release.touch()
        await orch.close()
