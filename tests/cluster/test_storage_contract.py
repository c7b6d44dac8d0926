"""The SQL stores' shared contract, run on SQLite and on PostgreSQL (the ``store`` fixture):
round trips, gaps and duplicates, checkpoints and compaction, agents, counters, group
commit, exit mode, close, and rows damaged behind the store's back."""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time
from typing import Any

import pytest

from cluster.storage import (
    DuplicateRequest,
    JournalEntry,
    JournalGap,
    MemoryStore,
    PostgresStore,
    RunExists,
    RunNotFound,
    SqliteStore,
    StoreClosed,
    StoreCorrupted,
    open_store,
    remove_finished_runs,
)
from tests._stores import StoreLocation
from tests._stores import batch_entry as entry
from tests._stores import run_info as info

#: How a test's store writes its runs: unclaimed (each write takes the run's lock for its
#: transaction), as the run's activation (fenced by its epoch), or under the store's claim.
#: Each checks an append its own way (an unclaimed run's write takes the run's lock first; an
#: activated run's reads its fencing row in the transaction of its checks), and each must
#: refuse the same appends.
WRITERS = ["unclaimed", "activated", "claimed"]


def take(store: Any, writer: str, *runs: str) -> None:
    """Make ``store`` write ``runs`` as ``writer`` says (see ``WRITERS``)."""
    for run in runs:
        if writer == "activated":
            store.activate(run, holder={"test": "contract"})
        elif writer == "claimed":
            store.claim_writer(run, holder={"test": "contract"})


def filled(store_location: StoreLocation, versions: int = 5) -> None:
    """A closed store with one run, ``versions`` journal entries and one agent."""
    s = store_location.open()
    s.create_run(info(), {"n": 0})
    s.append("run", [entry(v, payload={"pad": "x" * 10}) for v in range(1, versions + 1)]).result()
    s.put_agent("run", "agent-1", {"lifecycle": "idle"})
    s.close()


# -- round trips ------------------------------------------------------------------------


def test_create_get_and_list_runs_round_trip(store: Any) -> None:
    first, second = info("a"), info("b")
    store.create_run(first, {"x": 1})
    store.create_run(second, {"x": 2})
    assert store.get_run("a") == first
    assert store.get_run("missing") is None
    assert [r.name for r in store.list_runs()] == ["a", "b"]
    checkpoint, tail = store.load("b")
    assert (checkpoint.version, checkpoint.state, tail) == (0, {"x": 2}, [])


def test_a_long_metadata_value_of_many_runs_is_stored_once_and_read_back_whole(store_location: StoreLocation) -> None:
    # As a driver's runs carry one pickled caller: 16 KB each, the same text.
    store = store_location.open()
    caller = "c" * 16_000
    for i in range(50):
        store.create_run(info(f"r{i}").model_copy(update={"metadata": {"caller": caller, "k": i}}), {"n": 0})
    note = "n" * 2_000
    assert store.update_run_metadata("r7", {"status": "done", "note": note}).metadata == {
        "caller": caller, "k": 7, "status": "done", "note": note}
    reopened = store_location.open()  # nothing known in advance
    assert [r.metadata for r in reopened.list_runs()] == [
        {"caller": caller, "k": i, **({"status": "done", "note": note} if i == 7 else {})} for i in range(50)]
    assert reopened.get_run("r3").metadata == {"caller": caller, "k": 3}
    assert store_location.count("SELECT COUNT(*) FROM blobs") == 2  # the caller once, the note once
    assert store_location.count("SELECT SUM(LENGTH(metadata)) FROM runs") < 50 * 200


def test_metadata_shaped_like_a_stored_reference_is_refused_and_nothing_is_stored(store: Any) -> None:
    with pytest.raises(ValueError, match=r"run metadata 'x': a value of the form \{'\$blob': \.\.\.\} is reserved"):
        store.create_run(info("bad").model_copy(update={"metadata": {"x": {"$blob": "0" * 64}}}), {"n": 0})
    assert store.get_run("bad") is None


def test_a_run_whose_stored_caller_is_missing_fails_to_load_with_store_corrupted(store_location: StoreLocation) -> None:
    store_location.open().create_run(info("r").model_copy(update={"metadata": {"caller": "c" * 4_000}}), {"n": 0})
    with store_location.raw() as conn:
        conn.execute("DELETE FROM blobs")
    with pytest.raises(StoreCorrupted, match=r"metadata of run 'r' refers to blob [0-9a-f]{64}, which is missing"):
        store_location.open().get_run("r")


def test_gc_deletes_the_long_values_no_remaining_run_refers_to_and_a_new_run_stores_them_again(
    store_location: StoreLocation,
) -> None:
    store = store_location.open()
    now = 1_000_000.0
    shared, alone = "s" * 4_000, "a" * 4_000
    done = {"status": "complete", "finished_at": now - 8 * 86_400}
    store.create_run(info("old-alone").model_copy(update={"metadata": {"caller": alone, **done}}), {"n": 0})
    store.create_run(info("old-shared").model_copy(update={"metadata": {"caller": shared, **done}}), {"n": 0})
    store.create_run(info("live").model_copy(update={"metadata": {"caller": shared}}), {"n": 0})
    report = remove_finished_runs(store, 7 * 86_400, now=now)
    assert (report.removed, report.kept, report.values_removed) == (("old-alone", "old-shared"), ("live",), 1)
    assert store_location.count("SELECT COUNT(*) FROM blobs") == 1
    assert store_location.open().get_run("live").metadata == {"caller": shared}
    # This store object stored ``alone`` before: a new run of it must store it again.
    store.create_run(info("again").model_copy(update={"metadata": {"caller": alone}}), {"n": 0})
    store.update_run_metadata("live", {"note": alone})
    assert store_location.open().get_run("again").metadata == {"caller": alone}
    assert store_location.open().get_run("live").metadata == {"caller": shared, "note": alone}
    assert (store.collect_blobs(), store_location.count("SELECT COUNT(*) FROM blobs")) == (0, 2)


def test_runs_created_while_another_process_collects_values_keep_every_value_they_refer_to(
    store_location: StoreLocation,
) -> None:
    # Each run is deleted before the next is created, so between two runs the value is
    # unreferenced and the collector may delete it; the creator saw it stored the time before.
    caller = "c" * 4_000
    creator, collector = store_location.open(), store_location.open()
    stop = threading.Event()
    collected: list[int] = []

    def collect() -> None:
        while not stop.is_set():
            collected.append(collector.collect_blobs())

    thread = threading.Thread(target=collect)
    thread.start()
    try:
        for i in range(40):
            creator.create_run(info(f"r{i}").model_copy(update={"metadata": {"caller": caller}}), {"n": 0})
            assert store_location.count("SELECT COUNT(*) FROM blobs") == 1, f"run r{i} refers to a value not stored"
            creator.delete_run(f"r{i}")
            if i % 2 == 0:  # every other run: only once the collector deleted the value (else: racing it)
                deadline = time.monotonic() + 60
                while store_location.count("SELECT COUNT(*) FROM blobs") and time.monotonic() < deadline:
                    time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
    assert sum(collected) >= 20


def test_last_versions_of_many_runs_match_what_load_ends_at_without_reading_payloads(
    store_location: StoreLocation, store: Any
) -> None:
    for name in ("fresh", "busy", "compacted", "broken"):
        store.create_run(info(name), {"n": 0})
    store.append("busy", [entry(v) for v in range(1, 4)]).result()
    store.append("compacted", [entry(v) for v in range(1, 6)]).result()
    store.put_checkpoint("compacted", 5, {"n": 5})
    store.compact("compacted")  # the journal is empty now: the version is the checkpoint's
    store.append("broken", [entry(1), entry(2)]).result()
    with store_location.raw() as conn:  # a payload nobody can parse: load fails, the version is still known
        conn.execute("UPDATE journal SET payload = 'not json' WHERE run = 'broken'")
    with pytest.raises(StoreCorrupted):
        store.load("broken")
    found = store.last_versions(["fresh", "busy", "compacted", "broken", "missing", "busy"])
    assert found == {"fresh": 0, "busy": 3, "compacted": 5, "broken": 2}
    assert found["compacted"] == store.load("compacted")[0].version
    many = [f"run-{i:04d}" for i in range(1_200)]  # more names than one statement takes
    for name in many:
        store.create_run(info(name), {})
    store.append("run-1100", [entry(1)]).result()
    versions = store.last_versions(many)
    assert len(versions) == 1_200 and versions["run-1100"] == 1 and versions["run-0000"] == 0


def test_last_versions_count_entries_kept_in_memory_in_exit_mode(store_location: StoreLocation) -> None:
    store = store_location.open(durability="exit")
    store.create_run(info(), {})
    store.append("run", [entry(1), entry(2)])
    assert store.last_versions(["run"]) == {"run": 2}


def test_create_run_twice_raises_run_exists_naming_the_store(store: Any) -> None:
    store.create_run(info(), {})
    with pytest.raises(RunExists, match=f"'run' already exists in store {re.escape(store.path)}"):
        store.create_run(info(), {})


@pytest.mark.parametrize("writer", WRITERS)
def test_append_resolves_once_durable_and_load_returns_entries_in_order(store: Any, writer: str) -> None:
    store.create_run(info(), {"n": 0})
    take(store, writer, "run")
    assert store.append("run", [entry(1), entry(2)]).result() is None
    assert store.append("run", [entry(3)]).result() is None
    checkpoint, tail = store.load("run")
    assert checkpoint.version == 0
    assert [e.version for e in tail] == [1, 2, 3]
    assert tail[0].payload == [{"transition_type": "update_state", "v": 1}]
    assert store.find_request("run", "req-2") == 2
    assert store.find_request("run", "nope") is None


def test_entries_read_back_exactly_whatever_their_text_and_numbers(store: Any) -> None:
    """Payloads, request ids and times come back as written: escapes, quotes, backslashes,
    text outside ASCII, an escaped NUL, integers beyond 64 bits, floats to the last digit."""
    store.create_run(info(), {"n": 0})
    payloads: list[Any] = [
        {"text": 'line\nnext\ttab "quoted" back\\slash \\u0041 not an escape', "nul": "a\u0000b"},
        {"é": "ünïcödé ✓ 漢字 🙂", "big": 2**70, "neg": -(2**63), "pi": 3.141592653589793, "tiny": 5e-324},
        ["\"", "\\", "/", "\b\f\r", {"nested": [None, True, False, 1.5e300]}],
    ]
    times = [1_765_098_123.123_456_7, 0.1 + 0.2, 1e-7]
    written = [
        JournalEntry(version=v, request_id=rid, kind="fn", payload=p, created_at=t)
        for v, rid, p, t in zip((1, 2, 3), ("ünï-1", "tab\tid", 'q"uote'), payloads, times)
    ]
    store.append("run", written).result()
    _, tail = store.load("run")
    assert tail == written
    assert store.find_requests("run", ["ünï-1", "tab\tid", 'q"uote']) == {"ünï-1": 1, "tab\tid": 2, 'q"uote': 3}


@pytest.mark.parametrize("writer", WRITERS)
def test_append_with_a_gap_fails_with_journal_gap_and_writes_nothing(store: Any, writer: str) -> None:
    store.create_run(info(), {})
    take(store, writer, "run")
    store.append("run", [entry(1)]).result()
    with pytest.raises(JournalGap, match=rf"store {re.escape(store.path)}, run 'run': version 2 is missing"):
        store.append("run", [entry(3), entry(4)]).result()
    with pytest.raises(JournalGap):
        store.append("run", [entry(2), entry(4)]).result()
    assert [e.version for e in store.load("run")[1]] == [1]


@pytest.mark.parametrize("writer", WRITERS)
def test_duplicate_request_id_fails_and_writes_nothing(store: Any, writer: str) -> None:
    store.create_run(info(), {})
    take(store, writer, "run")
    store.append("run", [entry(1, "same")]).result()
    with pytest.raises(DuplicateRequest, match="'same' of run 'run' was already committed as version 1"):
        store.append("run", [entry(2, "fresh"), entry(3, "same")]).result()
    with pytest.raises(DuplicateRequest):
        store.append("run", [entry(2, "twice"), entry(3, "twice")]).result()
    assert store.find_request("run", "fresh") is None
    store.append("run", [entry(2, "fresh")]).result()


@pytest.mark.parametrize("writer", WRITERS)
def test_unknown_run_raises_run_not_found(store: Any, writer: str) -> None:
    take(store, writer, "ghost")
    with pytest.raises(RunNotFound, match="'ghost' not found"):
        store.append("ghost", [entry(1)]).result()
    with pytest.raises(RunNotFound):
        store.load("ghost")
    with pytest.raises(RunNotFound):
        store.put_agent("ghost", "a", {})


def test_non_json_payload_is_rejected_before_anything_is_queued(store: Any) -> None:
    store.create_run(info(), {})
    with pytest.raises(ValueError, match="payload of version 1 is not JSON-clean"):
        store.append("run", [entry(1, payload={"x": object()})])


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_a_payload_holding_a_non_finite_number_is_rejected_and_the_journal_is_unchanged(store: Any, number: float) -> None:
    # JSON has no NaN or infinity: written as null it would read back as something else.
    store.create_run(info(), {})
    store.append("run", [entry(1)]).result()
    with pytest.raises(ValueError, match="payload of version 2 is not JSON-clean"):
        store.append("run", [entry(2, payload={"ok": None, "deep": [1, {"x": number}]})])
    assert [e.version for e in store.load("run")[1]] == [1]
    store.append("run", [entry(2)]).result()  # the run goes on at the version that was refused
    assert [e.version for e in store.load("run")[1]] == [1, 2]


@pytest.mark.parametrize("writer", WRITERS)
def test_failing_append_in_a_group_does_not_fail_its_neighbours(store: Any, writer: str) -> None:
    store.create_run(info("a"), {})
    store.create_run(info("b"), {})
    take(store, writer, "a", "b")
    futures = [store.append("a", [entry(1)]), store.append("b", [entry(7)]), store.append("a", [entry(2)])]
    assert futures[0].result() is None and futures[2].result() is None
    assert isinstance(futures[1].exception(), JournalGap)


@pytest.mark.parametrize("writer", WRITERS)
def test_one_runs_appends_queued_together_each_get_their_own_outcome(store_location: StoreLocation, writer: str) -> None:
    """While another connection holds the database's write lock, one run's appends queue up
    and the writer then runs them as one append; one refused among them (a duplicate request
    id, a gap) fails alone and the others commit, as if each had been written alone."""
    store = store_location.open()
    store.create_run(info(), {})
    take(store, writer, "run")
    with store_location.raw() as raw:
        if store_location.kind == "sqlite":
            raw.execute("BEGIN IMMEDIATE")
        else:
            raw.execute("BEGIN")
            raw.execute("LOCK TABLE journal IN EXCLUSIVE MODE")
        futures = [
            store.append("run", [entry(1)]),
            store.append("run", [entry(2)]),
            store.append("run", [entry(3, request_id="req-1")]),  # a request id stored a moment before
            store.append("run", [entry(3), entry(4)]),
            store.append("run", [entry(6)]),  # a gap: version 5 is missing
            store.append("run", [entry(5)]),
        ]
        raw.execute("COMMIT")
    outcomes = [f.exception() for f in futures]
    assert [type(o).__name__ for o in outcomes] == ["NoneType", "NoneType", "DuplicateRequest", "NoneType",
                                                    "JournalGap", "NoneType"]
    _, entries = store.load("run")
    assert [(e.version, e.request_id) for e in entries] == [(v, f"req-{v}") for v in range(1, 6)]


def test_compact_keeps_the_last_two_checkpoints_and_load_is_checkpoint_plus_tail(
    store_location: StoreLocation, store: Any
) -> None:
    store.create_run(info(), {"n": 0})
    store.append("run", [entry(v) for v in range(1, 6)]).result()
    store.put_checkpoint("run", 2, {"n": 2})
    store.put_checkpoint("run", 4, {"n": 4})
    assert store.statistics().checkpoints == 3
    store.compact("run")
    assert store.statistics().checkpoints == 2
    store.close()
    reopened = store_location.open()
    checkpoint, tail = reopened.load("run")
    assert (checkpoint.version, checkpoint.state) == (4, {"n": 4})
    assert [e.version for e in tail] == [5]


def test_all_requests_are_every_stored_id_or_none_when_there_are_more_than_asked(store_location: StoreLocation) -> None:
    """What an orchestrator taken up again keeps in memory instead of asking the store for
    each group of writes: every id the store holds (those compaction deleted are gone from
    both), entries kept in memory by exit mode included; None past ``at_most``."""
    store = store_location.open()
    store.create_run(info(), {"n": 0})
    store.append("run", [entry(v) for v in range(1, 7)]).result()
    assert store.all_requests("run", at_most=6) == {f"req-{v}": v for v in range(1, 7)}
    assert store.all_requests("run", at_most=5) is None
    store.put_checkpoint("run", 4, {"n": 4})
    store.compact("run", keep_from=4)  # the retention window: the ids of versions 1-3 go
    assert store.all_requests("run", at_most=3) == {"req-4": 4, "req-5": 5, "req-6": 6}
    with pytest.raises(RunNotFound):
        store.all_requests("nope", at_most=10)
    store.close()
    kept = store_location.open(durability="exit")
    kept.append("run", [entry(7)])  # in memory until flushed
    assert kept.all_requests("run", at_most=4) == {"req-4": 4, "req-5": 5, "req-6": 6, "req-7": 7}
    assert kept.all_requests("run", at_most=3) is None
    kept.close()


def test_checkpoint_ahead_of_the_journal_raises_journal_gap(store: Any) -> None:
    store.create_run(info(), {})
    with pytest.raises(JournalGap, match="checkpoint at version 3 but the journal ends at 0"):
        store.put_checkpoint("run", 3, {})


def test_compact_removes_covered_rows_and_request_ids_stay_findable(store: Any) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(v) for v in range(1, 5)]).result()
    store.put_checkpoint("run", 3, {"n": 3})
    assert store.compact("run") == 3
    assert store.compact("run") == 0
    assert store.find_request("run", "req-1") == 1
    assert [e.version for e in store.load("run")[1]] == [4]
    assert store.statistics().journal_rows == 1
    with pytest.raises(DuplicateRequest):
        store.append("run", [entry(5, "req-2")]).result()


def test_agents_upsert_with_increasing_seq_and_list_in_seq_order(store: Any) -> None:
    store.create_run(info(), {})
    first = store.put_agent("run", "a", {"lifecycle": "initializing"})
    store.put_agent("run", "b", {"lifecycle": "idle"})
    updated = store.put_agent("run", "a", {"lifecycle": "running"})
    assert (first.seq, updated.seq) == (1, 3)
    assert store.get_agent("run", "a") == updated
    assert store.get_agent("run", "zzz") is None
    assert [(r.agent_id, r.seq) for r in store.list_agents("run")] == [("b", 2), ("a", 3)]


def test_statistics_count_commits_and_batches(store: Any) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1), entry(2)]).result()
    stats = store.statistics()
    assert (stats.path, stats.durability, stats.journal_rows, stats.checkpoints) == (store.path, "sync", 2, 1)
    assert stats.commits == 2 and stats.fsync_batches == 2 and stats.mean_batch_size == 1.0


def test_health_reports_a_reachable_store_and_its_server(store: Any) -> None:
    health = store.health()
    assert health.reachable and health.error is None and health.location == store.path
    assert health.server is not None and health.server.startswith(("SQLite", "PostgreSQL"))
    assert health.latency_ms is not None and health.latency_ms >= 0


def test_close_is_idempotent_and_later_calls_raise_store_closed(store: Any) -> None:
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        store.append("run", [entry(1)]).result()
    with pytest.raises(StoreClosed):
        store.get_run("run")


def test_open_store_accepts_none_a_store_a_path_or_a_postgres_url(store_location: StoreLocation) -> None:
    memory = MemoryStore()
    assert open_store(None) is None
    assert open_store(memory) is memory
    opened = open_store(store_location.location, durability="batch")
    try:
        assert isinstance(opened, SqliteStore if store_location.kind == "sqlite" else PostgresStore)
        assert opened.durability == "batch"
    finally:
        opened.close()
    with pytest.raises(TypeError, match="not int"):
        open_store(3)  # type: ignore[arg-type]


def test_unknown_durability_is_a_value_error(store_location: StoreLocation) -> None:
    with pytest.raises(ValueError, match="durability"):
        store_location.open(durability="never")


# -- group commit, exit mode ------------------------------------------------------------


def test_group_commit_shares_transactions_between_threads(store: Any) -> None:
    threads, per_thread = 8, 200
    for t in range(threads):
        store.create_run(info(f"r{t}"), {})
    before = store.statistics()
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        for v in range(1, per_thread + 1):
            error = store.append(f"r{t}", [entry(v)]).exception()
            if error is not None:
                errors.append(error)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stats = store.statistics()
    commits, batches = stats.commits - before.commits, stats.fsync_batches - before.fsync_batches
    assert errors == []
    assert commits == threads * per_thread
    assert batches < commits
    assert stats.journal_rows == threads * per_thread
    for t in range(threads):
        assert [e.version for e in store.load(f"r{t}")[1]] == list(range(1, per_thread + 1))


def test_exit_mode_keeps_entries_in_memory_until_flush(store_location: StoreLocation) -> None:
    s = store_location.open(durability="exit")
    s.create_run(info(), {})
    assert s.append("run", [entry(1)]).done()
    assert s.statistics().journal_rows == 0
    s.flush()
    assert s.statistics().journal_rows == 1
    s.append("run", [entry(2)])
    s.close()
    reopened = store_location.open()
    assert [e.version for e in reopened.load("run")[1]] == [1, 2]


def test_exit_mode_checkpoints_of_many_runs_at_once_never_overtake_their_entries(store_location: StoreLocation) -> None:
    # Many runs of one exit-mode store closing at once (a host unloading them): each writes
    # its entries and then a checkpoint from its own thread, while another thread may be
    # draining those entries. A checkpoint must never reach the writer before its entries.
    s = store_location.open(durability="exit")
    runs = [f"run-{i}" for i in range(100)]
    for run in runs:
        s.create_run(info(run), {})
    start = threading.Barrier(len(runs))

    def close_run(run: str) -> None:
        for v in range(1, 6):
            s.append(run, [entry(v, f"{run}-{v}")])
        start.wait()
        s.put_checkpoint(run, 5, {"v": 5})

    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        for done in [pool.submit(close_run, run) for run in runs]:
            done.result()  # a JournalGap here is a checkpoint that overtook its entries
    s.close()
    reopened = store_location.open()
    assert all(reopened.load(run)[0].version == 5 for run in runs)


def test_exit_mode_append_errors_surface_from_flush(store_location: StoreLocation) -> None:
    s = store_location.open(durability="exit")
    s.create_run(info(), {})
    s.append("run", [entry(5)])
    with pytest.raises(JournalGap):
        s.flush()


# -- rows damaged behind the store's back -------------------------------------------------


def test_journal_with_a_gap_fails_load_naming_the_store_run_and_version(store_location: StoreLocation) -> None:
    filled(store_location, versions=3)
    with store_location.raw() as conn:
        conn.execute("INSERT INTO journal VALUES ('run', 5, 'r5', 'batch', '[]', 0.0)")
    s = store_location.open()
    with pytest.raises(JournalGap, match=rf"store {re.escape(s.path)}, run 'run': version 4 is missing"):
        s.load("run")
    assert store_location.count("SELECT COUNT(*) FROM journal") == 4  # nothing was repaired or removed


def test_row_with_invalid_json_is_reported_corrupted(store_location: StoreLocation) -> None:
    filled(store_location)
    with store_location.raw() as conn:
        conn.execute("UPDATE agents SET record = '{not json'")
        conn.execute("UPDATE journal SET payload = '[' WHERE version = 2")
    s = store_location.open()
    with pytest.raises(StoreCorrupted, match=rf"store {re.escape(s.path)} is corrupted: record of agent 'agent-1'"):
        s.list_agents("run")
    with pytest.raises(StoreCorrupted, match="journal version 2 of run 'run' is not valid JSON"):
        s.load("run")
    assert s.find_request("run", "req-5") == 5


# -- one run's bad value fails that write alone -------------------------------------------


@pytest.mark.parametrize("bad", [
    pytest.param({"payload": {"text": "a\ud800b"}}, id="unpaired-surrogate-in-payload"),
    pytest.param({"request_id": "req\x00nul"}, id="nul-in-request-id"),
    pytest.param({"request_id": "req\udfff"}, id="unpaired-surrogate-in-request-id"),
])
def test_a_value_no_database_can_hold_is_refused_at_once_and_other_runs_appends_commit(store: Any, bad: dict[str, Any]) -> None:
    """Refused when the append is made, naming what is wrong, before it can join (and fail)
    another run's group commit; the run's journal is unchanged and goes on."""
    store.create_run(info("bad"), {"n": 0})
    store.create_run(info("good"), {"n": 0})
    fields: dict[str, Any] = {"payload": {"ok": 1}, **bad}
    with pytest.raises(ValueError, match="unpaired surrogate|NUL"):
        store.append("bad", [JournalEntry(version=1, kind="fn", created_at=0.0, **{"request_id": "r-bad", **fields})])
    # Many appends of the other run, queued together (one group), all commit.
    pending = [store.append("good", [entry(v)]) for v in range(1, 21)]
    for done in pending:
        done.result()
    assert [e.version for e in store.load("good")[1]] == list(range(1, 21))
    assert store.load("bad")[1] == []
    store.append("bad", [entry(1)]).result()
    assert [e.version for e in store.load("bad")[1]] == [1]
