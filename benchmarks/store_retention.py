"""Store size after many writes, with and without a retention window.

Writes ``WRITES`` versions to a SQLite store exactly as a durable orchestrator journals them
(one ``apply_batch`` entry per version: an ``update_state`` of one key, and every 100th
version a message too, so the state grows slowly as a real run's does), in groups of 64 per
fsync (``durability="batch"``), a checkpoint every 1,000 versions, and at each checkpoint
the compaction the orchestrator runs: none without retention (``keep_versions=None``), the
window of the last 1,000 versions with ``keep_versions=1000``. Prints the file size (main
file + WAL), journal rows and checkpoints left. No Ray needed: this is the storage path alone.

    python benchmarks/store_retention.py [WRITES]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from cluster.storage import JournalEntry, RunInfo, SqliteStore, Store
from coordinators import AgentState, TransitionBatch, reduce

GROUP = 64
CHECKPOINT_EVERY = 1_000


def _size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def journal_writes(store: Store, writes: int, keep_versions: int | None, after_checkpoint: Callable[[], None] | None = None) -> None:
    """Journal ``writes`` versions of a new run ``"run"`` in ``store`` as a durable orchestrator
    journals ``apply_batch`` (see the module docstring), with its checkpoints and compaction;
    ``after_checkpoint`` runs after each checkpoint."""
    state = AgentState()
    store.create_run(RunInfo(name="run", state_type="coordinators.AgentState", created_at=time.time(), owner_token="t"),
                     state.model_dump(mode="json"))
    version = 0
    while version < writes:
        entries = []
        for _ in range(min(GROUP, writes - version)):
            version += 1
            batch = TransitionBatch().update_state("last", version)
            if version % 100 == 0:
                batch.add_message({"role": "assistant", "content": f"step {version}"})
            state = reduce(state, batch)
            entries.append(JournalEntry(version=version, request_id=uuid.uuid4().hex, kind="batch",
                                        payload=[t.model_dump(mode="json") for t in batch], created_at=time.time()))
            if version % CHECKPOINT_EVERY == 0:
                store.append("run", entries).result()
                entries = []
                store.put_checkpoint("run", version, state.model_dump(mode="json"))
                if keep_versions is not None:
                    store.compact("run", keep_from=max(0, version - keep_versions))
                if after_checkpoint is not None:
                    after_checkpoint()
        if entries:
            store.append("run", entries).result()


def fill(path: str, writes: int, keep_versions: int | None) -> tuple[float, int]:
    """Seconds to journal ``writes`` versions into a new SQLite file, and its peak size."""
    store = SqliteStore(path, durability="batch")
    peak = 0

    def measure() -> None:
        nonlocal peak
        peak = max(peak, _size(path))

    started = time.perf_counter()
    journal_writes(store, writes, keep_versions, measure)
    seconds = time.perf_counter() - started
    store.close()
    return seconds, max(peak, _size(path))


def main(writes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for label, keep in (("no retention (keep everything)", None), ("keep_versions=1000", 1_000)):
            path = os.path.join(tmp, f"{keep}.sqlite")
            seconds, peak = fill(path, writes, keep)
            store = SqliteStore(path)
            stats = store.statistics()
            store.close()
            print(f"{label:32s} {writes:>7,d} writes in {seconds:6.1f} s: file {_size(path) / 1e6:7.2f} MB "
                  f"(peak {peak / 1e6:.2f} MB), {stats.journal_rows:>7,d} journal rows, {stats.checkpoints} checkpoints")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
