"""Crash recovery end to end: SIGKILL the process holding a run (its host, or its dedicated
actor) while a driver applies.

The driver (``_crash_driver.py``) runs in its own process, joins this module's own Ray (a
``soloist up`` cluster under a private ``SOLOIST_HOME``, started once for the three tests and
stopped after them; the processes killed are never the session's) and
applies 1,000 increments with explicit request ids (some resent on purpose). This test
kills the orchestrator's worker process with SIGKILL at random acknowledgement counts
(the driver holds its last requests until the test has made every kill, so all of them
happen whatever the machine's load).
Afterwards the state must equal the number of acknowledged requests exactly, the
acknowledged versions must be exactly 1..N, and every resend must return the version of
the original (nothing applied twice) - also as read back from the store file.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.storage import SqliteStore
from tests._waits import HANG_GUARD_S, process_gone

pytestmark = pytest.mark.timeout(900)

DRIVER = Path(__file__).with_name("_crash_driver.py")
APPLIES = 1_000
KILLS = 4
HOLD_TAIL = 50  # the driver's last requests, held until every kill is made
DEADLINE_SECONDS = 600  # a hang guard for the whole driver run, not a speed goal


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crash_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of this module's own Ray: ``soloist up`` (2 CPUs) under a private
    ``SOLOIST_HOME``, stopped by ``soloist down`` after the last test, its head's pid gone."""
    home = tmp_path_factory.mktemp("crash-home")
    # RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0: `down`'s SIGTERM skips Ray's 30 s drain (see
    # tests/cluster/test_local_cluster.py).
    env = {**os.environ, "SOLOIST_HOME": str(home), "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.pop("RAY_ADDRESS", None)

    def soloist(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True,
                              timeout=HANG_GUARD_S * 2, env=env, cwd=home)

    for attempt in range(1, 4):  # Ray gives its raylet a fixed 30 s to come up; a busy machine may need longer
        up = soloist("up", "--num-cpus", "2")
        if up.returncode == 0 or "timed out during startup" not in up.stderr + up.stdout or attempt == 3:
            break
        warnings.warn(f"soloist up: Ray startup attempt {attempt} timed out on a busy machine; retrying", stacklevel=2)
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    record = json.loads((home / "local-cluster.json").read_text())
    try:
        yield str(record["address"])
    finally:
        down = soloist("down")
    assert down.returncode == 0 and f"stopped the local cluster at {record['address']}" in down.stdout, down.stderr
    asyncio.run(process_gone(record["pid"]))


def _run_driver_and_kill(address: str, store: Path, mode: str, concurrency: int, seed: int,
                         placement: str = "hosted") -> dict[str, object]:
    """Run the driver, SIGKILL the orchestrator at ``KILLS`` random points, parse its report."""
    rng = random.Random(seed)
    thresholds = sorted(rng.sample(range(50, APPLIES - HOLD_TAIL), KILLS))
    env = {**os.environ, "RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), address, str(store), mode, str(APPLIES), str(concurrency), "97", str(HOLD_TAIL),
         placement],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    acks: dict[int, int] = {}
    resends: dict[int, int] = {}
    pids: list[int] = []
    killed: list[int] = []
    final: tuple[int, int] | None = None
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                break
            kind, *rest = line.split()
            if kind == "PID":
                pids.append(int(rest[0]))
            elif kind == "ACK":
                assert int(rest[0]) not in acks, f"request {rest[0]} acknowledged twice by the driver"
                acks[int(rest[0])] = int(rest[1])
            elif kind == "RESEND":
                resends[int(rest[0])] = int(rest[1])
            elif kind == "FINAL":
                final = (int(rest[0]), int(rest[1]))
            # Kill at the next threshold, once the worker that answered since the last kill is known.
            if thresholds and len(acks) >= thresholds[0] and pids and pids[-1] not in killed:
                thresholds.pop(0)
                killed.append(pids[-1])
                os.kill(pids[-1], signal.SIGKILL)
                if not thresholds:  # every kill made: let the held tail run
                    assert proc.stdin is not None
                    proc.stdin.write("go\n")
                    proc.stdin.close()
        assert proc.wait(timeout=HANG_GUARD_S) == 0, f"driver exited with {proc.returncode}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {"acks": acks, "resends": resends, "pids": pids, "killed": killed, "final": final}


def _assert_exactly_once(report: dict[str, object], store: Path, name: str) -> None:
    acks: dict[int, int] = report["acks"]  # type: ignore[assignment]
    resends: dict[int, int] = report["resends"]  # type: ignore[assignment]
    killed: list[int] = report["killed"]  # type: ignore[assignment]
    pids: list[int] = report["pids"]  # type: ignore[assignment]
    assert len(killed) == KILLS, f"only {len(killed)} kills happened (pids seen: {pids})"
    assert len(set(pids)) >= len(killed) + 1, "the orchestrator did not come back after every kill"
    assert sorted(acks) == list(range(APPLIES)), "some requests were never acknowledged"
    assert sorted(acks.values()) == list(range(1, APPLIES + 1)), "acknowledged versions have a gap or a repeat"
    assert resends and all(resends[i] == acks[i] for i in resends), "a resent request id got another version"
    assert report["final"] == (APPLIES, APPLIES), f"state/version after recovery: {report['final']}"
    stored = SqliteStore(store)
    try:
        checkpoint, entries = stored.load(name)
        last = entries[-1].version if entries else checkpoint.version
        assert last == APPLIES
        assert [e.version for e in entries] == list(range(checkpoint.version + 1, last + 1))
        for i in (0, 97, 500, APPLIES - 1):
            assert stored.find_request(name, f"req-{i}") == acks[i]
    finally:
        stored.close()


def test_sync_mode_survives_sigkills_of_its_host_with_every_acknowledged_apply_exactly_once(crash_cluster: str,
                                                                                         tmp_path: Path) -> None:
    store = tmp_path / "crash-sync.db"
    report = _run_driver_and_kill(crash_cluster, store, "sync", concurrency=1, seed=4)
    _assert_exactly_once(report, store, "crash-sync-hosted")


def test_a_dedicated_run_survives_sigkills_of_its_actor_with_every_acknowledged_apply_exactly_once(crash_cluster: str,
                                                                                                 tmp_path: Path) -> None:
    store = tmp_path / "crash-sync.db"
    report = _run_driver_and_kill(crash_cluster, store, "sync", concurrency=4, seed=6, placement="dedicated")
    _assert_exactly_once(report, store, "crash-sync-dedicated")


def test_batch_mode_survives_sigkills_of_its_host_with_every_acknowledged_apply_exactly_once(crash_cluster: str,
                                                                                          tmp_path: Path) -> None:
    store = tmp_path / "crash-batch.db"
    report = _run_driver_and_kill(crash_cluster, store, "batch", concurrency=8, seed=5)
    _assert_exactly_once(report, store, "crash-batch-hosted")
