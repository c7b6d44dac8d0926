"""One writer per run, from the command line: ``soloist history / approve / fork`` against a run
another process drives, two ``soloist approve`` racing for one interrupt, and ``soloist
approve`` against a driver that waits in ``resume_when_answered()`` on its own embedded Ray.

Every process is real. Each coordinator turn and each skill body appends an fsynced line to a
ledger from its own actor process; the counts after the commands prove nothing ran twice, and
the store's journal is read back to prove it has no gap.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from actors import Orchestrator, Run, answer_interrupt, open_interrupts
from cluster.storage import SqliteStore
from coordinators import AgentState
from tests._cli_process import CliProcess
from tests._waits import eventually
from tests.actors.run_fixtures import counts, skill_registry, three

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "cluster" / "_live_run_driver.py"
APPROVER = REPO / "tests" / "cluster" / "_approve_on_signal.py"
BEFORE_THE_INTERRUPT = {"coordinator:planner": 1}
ALL_DONE = {"coordinator:planner": 1, "coordinator:worker": 1, "coordinator:reviewer": 1,
            "skill:echo:a": 1, "skill:echo:b": 1}
HANG_GUARD = 600  # seconds: only a hang reaches it (a new embedded Ray is slow on a loaded machine)


def _env(*, user_shell: bool = True) -> dict[str, str]:
    """A user's shell: no Ray address, and no token mode switched on by this test's own Ray
    (``user_shell=False`` keeps the token mode this test's Ray set, to join it by address)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "400"}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE") if user_shell else ("RAY_ADDRESS",):
        env.pop(name, None)
    return env


def _soloist(*args: str, user_shell: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True,
                          timeout=HANG_GUARD, env=_env(user_shell=user_shell), cwd=REPO)


def _start_driver(address: str, store: Path, name: str, log: Path, mode: str, go: Path, tmp: Path,
                  *, user_shell: bool = True) -> tuple[subprocess.Popen[str], str, int, list[str], Path]:
    errors = tmp / f"{name}.driver.stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, str(DRIVER), address, str(store), name, str(log), mode, str(go)],
                                stdout=subprocess.PIPE, stderr=stderr, text=True, env=_env(user_shell=user_shell),
                                cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()  # blocks until the run waits (or the driver died)
    assert line and line[0] == "WAITING", f"the driver did not reach the waiting state: {line}; stderr:\n{errors.read_text()[-3000:]}"
    return proc, line[1], int(line[2]), line[3:], errors


def _finish(proc: subprocess.Popen[str], errors: Path) -> list[str]:
    """The driver's last line (``DONE status version pid restarted``) once it exited."""
    assert proc.stdout is not None
    rest = proc.stdout.read()
    code = proc.wait(timeout=HANG_GUARD)
    assert code == 0, f"the driver failed ({code}); stdout: {rest!r}; stderr:\n{errors.read_text()[-4000:]}"
    done = [line.split() for line in rest.splitlines() if line.startswith("DONE")]
    assert done, rest
    return done[-1]


def _journal(store: Path, name: str) -> list[int]:
    """The run's stored versions, read back from the file (``load`` raises on a gap)."""
    opened = SqliteStore(store)
    try:
        checkpoint, entries = opened.load(name)
        versions = [checkpoint.version, *(e.version for e in entries)]
    finally:
        opened.close()
    assert versions == list(range(versions[0], versions[0] + len(versions))), versions
    return versions


def test_history_approve_and_fork_leave_a_run_that_another_process_drives_running(tmp_path: Path) -> None:
    store, log, go, name = tmp_path / "runs.sqlite", tmp_path / "ledger.log", tmp_path / "go", "live-elsewhere"
    address = ray.get_runtime_context().gcs_address  # every process here joins this test's Ray
    proc, _, actor_pid, ids, errors = _start_driver(address, store, name, log, "answer", go, tmp_path, user_shell=False)
    try:
        assert counts(log) == BEFORE_THE_INTERRUPT and len(ids) == 2
        waiting_at = _journal(store, name)[-1]

        # The three commands one after another in one process, which joins this test's Ray once.
        with CliProcess(env=_env(user_shell=False), cwd=REPO, timeout=HANG_GUARD) as soloist:
            history = soloist("history", name, "--store", str(store), "--address", address, "--json")
            assert history.returncode == 0, history.stderr[-3000:]
            assert [json.loads(line)["version"] for line in history.stdout.splitlines() if line.strip()] == \
                list(range(1, waiting_at + 1))
            assert name in Orchestrator.list_live(), "soloist history stopped the run"

            approved = soloist("approve", name, ids[0], "--store", str(store), "--address", address)
            assert approved.returncode == 0 and f"approved {ids[0]}" in approved.stdout, approved.stderr[-3000:]
            assert name in Orchestrator.list_live(), "soloist approve stopped the run"

            forked = soloist("fork", name, "--at", "1", "--name", f"{name}-fork", "--store", str(store), "--address", address)
            assert forked.returncode == 0, forked.stderr[-3000:]

        # The run is still the same live actor, never restarted, one answer further.
        live = Orchestrator.attach(name)
        stats = asyncio.run(live.statistics())
        assert (stats.pid, stats.restarted, stats.version) == (actor_pid, False, waiting_at + 1)
        asyncio.run(live.close())  # a borrowed handle: releasing it leaves the run going
        assert name in Orchestrator.list_live()
    finally:
        go.touch()
    status, version, pid, restarted = _finish(proc, errors)[1:]
    # The driver answered the other interrupt and resumed through the same actor, to the end.
    assert (status, int(pid), restarted) == ("complete", actor_pid, "False")
    assert counts(log) == ALL_DONE
    assert _journal(store, name)[-1] == int(version)


def test_two_overlapping_approves_of_one_interrupt_write_one_answer_and_refuse_the_other(tmp_path: Path) -> None:
    store, log, go, name = tmp_path / "runs.sqlite", tmp_path / "ledger.log", tmp_path / "go", "approve-race"

    async def waiting_run() -> list[str]:
        orch = Orchestrator(AgentState(), caller=skill_registry(), name=name, store=str(store))
        try:
            outcome = await Run(orch, three(str(log), approve="each"), first="planner", fallback="reviewer").run("go")
            assert outcome.status == "waiting"
            return [i.id for i in outcome.interrupts]
        finally:
            await orch.close()  # stored, not live: each approve restarts it from the store

    ids = asyncio.run(waiting_run())
    before = _journal(store, name)[-1]
    # Two `soloist approve` processes, each on its own embedded Ray (as two people would run
    # them), each with the run opened as the command opens it, released together.
    procs = [subprocess.Popen([sys.executable, str(APPROVER), str(go), name, ids[0], "--store", str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
             for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            lines = [proc.stdout.readline()]
            while lines[-1] and lines[-1].strip() != "READY":  # Ray's own log lines come first
                lines.append(proc.stdout.readline())
            assert lines[-1].strip() == "READY", (lines, proc.stderr.read() if proc.stderr else "")
        go.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=HANG_GUARD)
            results.append((proc.returncode, out, err))
    finally:
        go.touch()  # an approver still waiting (the other one failed) goes on, and ends with its Ray
        for proc in procs:
            if proc.poll() is None:
                try:
                    proc.communicate(timeout=HANG_GUARD)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
    outputs = " | ".join(f"{code}: {out[-1500:]} {err[-3000:]}" for code, out, err in results)
    assert sorted(code for code, _, _ in results) == [0, 1], outputs
    assert "JournalGap" not in outputs and "journal gap" not in outputs, outputs
    (loser,) = [err for code, _, err in results if code == 1]
    assert "already approved" in loser or "already open for writing" in loser, outputs
    assert _journal(store, name)[-1] == before + 1  # exactly one answer was written, no gap

    async def finish() -> None:
        orch = Orchestrator.attach(name, store=str(store))
        try:
            open_ = [i.id for i in await open_interrupts(orch)]
            assert open_ == ids[1:]
            await answer_interrupt(orch, ids[1], approve=True)
            outcome = await Run(orch, three(str(log)), first="planner", fallback="reviewer").resume()
            assert outcome.status == "complete", outcome.reason
        finally:
            await orch.close()

    asyncio.run(finish())
    assert counts(log) == ALL_DONE


def test_approve_reaches_a_waiting_driver_on_its_own_ray_only_through_its_address(tmp_path: Path) -> None:
    store, log, name = tmp_path / "runs.sqlite", tmp_path / "ledger.log", "waits-on-its-own-ray"
    proc, address, actor_pid, ids, errors = _start_driver("embedded", store, name, log, "wait", tmp_path / "unused", tmp_path)
    try:
        assert counts(log) == BEFORE_THE_INTERRUPT and len(ids) == 2
        waiting_at = _journal(store, name)[-1]
        # On this command's own default Ray the live run is out of reach: refused, naming the way in.
        refused = _soloist("approve", name, ids[0], "--store", str(store))
        assert refused.returncode == 1, (refused.stdout[-2000:], refused.stderr[-3000:])
        assert f"--address {address}" in refused.stderr and "already open for writing" in refused.stderr, refused.stderr[-3000:]
        assert _journal(store, name)[-1] == waiting_at  # the refused command wrote nothing
        # Through the driver's cluster it reaches the live orchestrator; the driver then resumes.
        # Both answers from one process, which joins the driver's Ray once.
        with CliProcess(env=_env(), cwd=REPO, timeout=HANG_GUARD) as soloist:
            for interrupt_id in ids:
                answered = soloist("approve", name, interrupt_id, "--store", str(store), "--address", address)
                assert answered.returncode == 0 and f"approved {interrupt_id}" in answered.stdout, answered.stderr[-3000:]
    except BaseException:
        proc.kill()
        raise
    status, version, pid, restarted = _finish(proc, errors)[1:]
    assert (status, int(pid), restarted) == ("complete", actor_pid, "False")
    assert counts(log) == ALL_DONE
    assert _journal(store, name)[-1] == int(version)
