"""The SQLite and PostgreSQL stores side by side: size and speed of a 500-turn run.

A run of ``TURNS`` turns appends one message per turn (about 400 characters), journalled as
a durable orchestrator journals an ``apply``: one ``fn`` entry whose payload is the state
diff (``diff_states``: the appended message only, never a copy of the state), ``sync``
durability (each append acknowledged once committed), a checkpoint every 1,000 versions as
by default. Prints per store: its size afterwards (SQLite: file + WAL; PostgreSQL: the
tables and indexes of its schema), the median and 99th-percentile append latency, and the
appends per second of 8 threads writing 8 runs at once (group commit). The PostgreSQL store
runs on ``SOLOIST_TEST_POSTGRES_URL`` when set, else on a throw-away server of its own
(``tests/_postgres.py``). No Ray needed: this is the storage path alone.

    python benchmarks/store_backends.py [TURNS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from cluster.storage import JournalEntry, PostgresStore, RunInfo, SqliteStore, diff_states
from coordinators import AgentState, Message
from tests._postgres import PostgresServer, shared_server

TURNS = 500
THREADS, PER_THREAD = 8, 250


def _run(store: Any, turns: int) -> list[float]:
    """One run of ``turns`` sync appends; the latency of each."""
    state = AgentState()
    doc = state.model_dump(mode="json")
    store.create_run(RunInfo(name="run", state_type="coordinators.AgentState", created_at=time.time(), owner_token="t"), doc)
    latencies = []
    for turn in range(1, turns + 1):
        state = state.model_copy(update={"messages": [*state.messages, Message(role="user", content=f"turn {turn}: " + "x" * 400)]})
        new = state.model_dump(mode="json")
        entry = JournalEntry(version=turn, request_id=uuid.uuid4().hex, kind="fn", payload=diff_states(doc, new),
                             created_at=time.time())
        doc = new
        started = time.perf_counter()
        store.append("run", [entry]).result()
        latencies.append(time.perf_counter() - started)
    return latencies


def _throughput(store: Any) -> float:
    """Appends per second of THREADS threads, each appending PER_THREAD entries to its own run."""
    for t in range(THREADS):
        store.create_run(RunInfo(name=f"t{t}", state_type="x", created_at=time.time(), owner_token="t"), {})

    def write(t: int) -> None:
        for v in range(1, PER_THREAD + 1):
            store.append(f"t{t}", [JournalEntry(version=v, request_id=f"t{t}-{v}", kind="fn", payload={"set": {"v": v}},
                                                created_at=time.time())]).result()

    threads = [threading.Thread(target=write, args=(t,)) for t in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return THREADS * PER_THREAD / (time.perf_counter() - started)


def _report(kind: str, size: int, latencies: list[float], rate: float) -> None:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{kind:10s} size {size / 1e6:6.2f} MB  append p50 {statistics.median(latencies) * 1000:6.2f} ms  "
          f"p99 {p99 * 1000:6.2f} ms  {rate:7.0f} appends/s (8 threads)", flush=True)


def sqlite(turns: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "runs.sqlite")
        store = SqliteStore(path)
        latencies = _run(store, turns)
        size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        rate = _throughput(store)
        store.close()
    _report("sqlite", size, latencies, rate)


def postgres(turns: int, server: PostgresServer) -> None:
    url = server.fresh_url()
    store = PostgresStore(url)
    latencies = _run(store, turns)
    with server.connect(url) as conn:
        (size,) = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        ).fetchone()
    rate = _throughput(store)
    store.close()
    _report("postgresql", int(size), latencies, rate)


def main(turns: int = TURNS) -> None:
    print(f"{turns} turns, one ~400-character message a turn, sync appends of the state diff", flush=True)
    sqlite(turns)
    server = shared_server()
    try:
        postgres(turns, server)
    finally:
        server.destroy()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS)
