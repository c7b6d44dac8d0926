"""PostgresStore's own facts: its schema on the server (created, migrated, refused when newer,
kept apart by search_path), bad URLs and servers, a server killed and restarted under
running writers (they pause, retry with the same request ids, and go on; nothing acknowledged
is lost or stored twice), and a commit whose answer was lost on the way back."""

from __future__ import annotations

import threading
import time
from typing import Any

import socket

import pytest

from cluster.storage import (
    SCHEMA_VERSION,
    DuplicateRequest,
    PostgresStore,
    RunLockedElsewhere,
    SchemaTooNew,
    StoreUnreachable,
    StoreWriteFailed,
    WriterFenced,
    open_store,
    redact,
)
from tests._pg_proxy import CommitCutter
from tests._postgres import USER_WITH_PASSWORD, PostgresServer, schema_url
from tests._stores import batch_entry as _entry
from tests._stores import run_info as _info
from tests._waits import HANG_GUARD_S


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    return postgres_server.fresh_url()


def _with_password(base: str, password: str) -> str:
    user, _ = USER_WITH_PASSWORD
    return base.replace("postgresql://postgres@", f"postgresql://{user}:{password}@")


# -- schema ---------------------------------------------------------------------------------


def test_a_new_database_gets_the_schema_and_its_version(url: str, postgres_server: PostgresServer) -> None:
    PostgresStore(url).close()
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM soloist_schema").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}
    assert {"runs", "checkpoints", "journal", "requests", "agents", "activations", "writer_claims"} <= tables


def test_a_database_of_schema_1_is_migrated_in_place_and_keeps_its_runs(url: str, postgres_server: PostgresServer) -> None:
    first = PostgresStore(url)
    first.create_run(_info(), {"n": 0})
    first.append("run", [_entry(1)]).result()
    first.close()
    with postgres_server.connect(url) as conn:  # as a soloist before fencing left it
        conn.execute("DROP TABLE activations")
        conn.execute("DROP TABLE writer_claims")
        conn.execute("DROP TABLE blobs")
        conn.execute("UPDATE soloist_schema SET version = 1")

    reopened = PostgresStore(url)
    try:
        assert reopened.activate("run", holder={}) == 1
        reopened.append("run", [_entry(2)]).result()
        assert [e.version for e in reopened.load("run")[1]] == [1, 2]
    finally:
        reopened.close()
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM soloist_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_many_processes_opening_one_new_database_at_once_create_the_schema_once(url: str, postgres_server: PostgresServer) -> None:
    start = threading.Barrier(4)
    opened: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(PostgresStore(url))
        except BaseException as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for store in opened:
        store.close()
    assert errors == [] and len(opened) == 4
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM soloist_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_database_of_a_newer_schema_is_refused_and_left_untouched(url: str, postgres_server: PostgresServer) -> None:
    first = PostgresStore(url)
    first.create_run(_info(), {"n": 0})
    first.close()
    with postgres_server.connect(url) as conn:
        conn.execute("UPDATE soloist_schema SET version = 99")
    with pytest.raises(SchemaTooNew, match=r"has schema version 99, .* supports schema version 3 .* upgrade soloist") as refused:
        PostgresStore(url)
    assert refused.value.path == redact(url)
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM soloist_schema").fetchall() == [(99,)]
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_two_search_paths_keep_two_stores_apart_in_one_database(postgres_server: PostgresServer) -> None:
    base = postgres_server.base_url
    suffix = str(time.time_ns())
    a, b = schema_url(base, f"apart_a_{suffix}"), schema_url(base, f"apart_b_{suffix}")  # created by the store
    first, second = PostgresStore(a), PostgresStore(b)
    try:
        first.create_run(_info("only-in-a"), {})
        assert [r.name for r in first.list_runs()] == ["only-in-a"]
        assert second.list_runs() == []
        second.create_run(_info("only-in-a"), {})  # the same name, another store
    finally:
        first.close()
        second.close()
        with postgres_server.connect(base) as conn:
            for schema in (f"apart_a_{suffix}", f"apart_b_{suffix}"):
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# -- bad URLs and servers ------------------------------------------------------------------


def test_a_malformed_url_is_a_value_error_naming_it_without_its_password() -> None:
    with pytest.raises(ValueError, match=r"store postgresql://u:\*\*\*@h:5432/db\?nonsense=1 is not a valid PostgreSQL URL") as bad:
        PostgresStore("postgresql://u:hunter2@h:5432/db?nonsense=1")
    assert "hunter2" not in str(bad.value) and "nonsense" in str(bad.value)


def test_a_wrong_password_is_refused_at_once_naming_the_server_not_the_password(
    url: str, postgres_server: PostgresServer
) -> None:
    good = _with_password(url, USER_WITH_PASSWORD[1])
    store = PostgresStore(good)
    store.create_run(_info(), {"n": 0})
    store.append("run", [_entry(1)]).result()
    store.close()
    with pytest.raises(StoreUnreachable, match="password authentication failed") as refused:
        PostgresStore(_with_password(url, "wrong-password"), retry_for_s=HANG_GUARD_S)  # no retry mends it
    assert "wrong-password" not in str(refused.value) and f"{USER_WITH_PASSWORD[0]}:***@127.0.0.1" in str(refused.value)
    reopened = PostgresStore(good)
    try:
        assert [e.version for e in reopened.load("run")[1]] == [1]  # nothing committed was touched
    finally:
        reopened.close()


def test_a_server_nobody_listens_on_is_reported_unreachable_after_the_retry_time() -> None:
    free = _free_port()
    with pytest.raises(StoreUnreachable, match=rf"store postgresql://me:\*\*\*@127.0.0.1:{free}/db: the database is unreachable after retrying") as refused:
        PostgresStore(f"postgresql://me:pw@127.0.0.1:{free}/db", retry_for_s=0.3)
    assert isinstance(refused.value, StoreWriteFailed) and "pw@" not in str(refused.value)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_open_store_selects_postgres_for_both_url_schemes(url: str) -> None:
    for spec in (url, url.replace("postgresql://", "postgres://", 1)):
        store = open_store(spec, durability="batch")
        try:
            assert isinstance(store, PostgresStore) and store.durability == "batch"
        finally:
            store.close()  # type: ignore[union-attr]


# -- the server killed and restarted under running writers ---------------------------------


class _Writers:
    """Threads that append to their own runs without pause, each recording what was acknowledged."""

    def __init__(self, store: PostgresStore, runs: int) -> None:
        self.store = store
        self.acked: dict[str, list[int]] = {f"w{i}": [] for i in range(runs)}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._progress = threading.Condition()
        for run in self.acked:
            store.create_run(_info(run), {})
        self._threads = [threading.Thread(target=self._write, args=(run,)) for run in self.acked]
        for t in self._threads:
            t.start()

    def _write(self, run: str) -> None:
        version = 0
        while not self._stop.is_set():
            version += 1
            try:
                self.store.append(run, [_entry(version, f"{run}-{version}")]).result()
            except BaseException as exc:  # recorded and asserted on by the test
                self.errors.append(exc)
                return
            with self._progress:
                self.acked[run].append(version)
                self._progress.notify_all()

    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_for(self, total: int) -> None:
        """Block until at least ``total`` appends were acknowledged (or a writer failed)."""
        with self._progress:
            assert self._progress.wait_for(lambda: self.total() >= total or bool(self.errors), timeout=HANG_GUARD_S)
        assert self.errors == []

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def test_a_server_killed_and_restarted_mid_run_loses_nothing_acknowledged_and_applies_nothing_twice(
    own_server: PostgresServer,
) -> None:
    url = own_server.fresh_url()
    store = PostgresStore(url, retry_for_s=HANG_GUARD_S)
    writers = _Writers(store, runs=4)
    try:
        writers.wait_for(200)
        own_server.stop("immediate")  # as a crash: no shutdown checkpoint, every connection cut
        paused = store.append("w0", [_entry(10**6, "while-down")])  # any version: it cannot be written now
        before_restart = writers.total()
        assert not paused.done()  # the server is gone: nothing can be acknowledged
        own_server.start()
        writers.wait_for(before_restart + 200)  # they went on, through new connections
    finally:
        writers.stop()
    assert writers.errors == []
    assert paused.exception() is not None  # a gap (version 10**6), reported, not lost in the restart
    stats = store.statistics()
    assert stats.journal_rows == writers.total() and stats.reconnects >= 1
    store.close()
    with own_server.connect(url) as conn:
        for run, acked in writers.acked.items():
            stored = [v for (v,) in conn.execute("SELECT version FROM journal WHERE run = %s ORDER BY version", (run,))]
            assert stored == list(range(1, len(stored) + 1))  # no gap, nothing twice
            assert stored[: len(acked)] == acked  # every acknowledged append is there
        requests = conn.execute("SELECT COUNT(*), COUNT(DISTINCT (run, request_id)) FROM requests").fetchone()
        assert requests[0] == requests[1] == writers.total()


def test_reads_wait_for_a_restarting_server_and_then_answer(own_server: PostgresServer) -> None:
    url = own_server.fresh_url()
    store = PostgresStore(url, retry_for_s=HANG_GUARD_S)
    try:
        store.create_run(_info(), {"n": 1})
        own_server.stop("immediate")
        answer: list[Any] = []
        reader = threading.Thread(target=lambda: answer.append(store.load("run")[0].state))
        reader.start()
        own_server.start()
        reader.join()
        assert answer == [{"n": 1}]
    finally:
        store.close()


def test_a_claim_is_taken_again_after_the_server_restarted_so_the_run_keeps_one_writer(own_server: PostgresServer) -> None:
    url = own_server.fresh_url()
    holder, other = PostgresStore(url, retry_for_s=HANG_GUARD_S), PostgresStore(url, retry_for_s=HANG_GUARD_S)
    try:
        holder.create_run(_info(), {})
        holder.claim_writer("run", holder={"address": "holder:1"})
        own_server.stop("immediate")  # every session ends, and with them the advisory locks
        own_server.start()
        holder.append("run", [_entry(1)]).result()  # reconnects, and takes its claim again first
        with pytest.raises(RunLockedElsewhere, match="holder:1"):
            other.claim_writer("run", holder={}, timeout=0.1)
        assert isinstance(other.append("run", [_entry(2)]).exception(timeout=HANG_GUARD_S), RunLockedElsewhere)
    finally:
        holder.close()
        other.close()


def test_a_server_that_never_comes_back_fails_the_writes_naming_it(own_server: PostgresServer) -> None:
    url = own_server.fresh_url()
    store = PostgresStore(url, retry_for_s=1.0)
    try:
        store.create_run(_info(), {})
        store.append("run", [_entry(1)]).result()
        own_server.stop("immediate")
        failed = store.append("run", [_entry(2)]).exception(timeout=HANG_GUARD_S)
        assert isinstance(failed, StoreUnreachable) and isinstance(failed, StoreWriteFailed)
        assert f"store {redact(url)}: the database is unreachable after retrying for" in str(failed)
        with pytest.raises(StoreUnreachable):
            store.get_run("run")
    finally:
        own_server.start()
        store.close()
    reopened = PostgresStore(url)
    try:
        assert [e.version for e in reopened.load("run")[1]] == [1]
    finally:
        reopened.close()


# -- a commit whose acknowledgement was lost --------------------------------------------------


def test_a_write_whose_commit_answer_was_lost_is_recognised_as_committed_not_duplicated(
    url: str, postgres_server: PostgresServer
) -> None:
    proxy = CommitCutter(postgres_server.port)
    store = PostgresStore(proxy.url(url), retry_for_s=HANG_GUARD_S)
    try:
        proxy.arm()
        store.create_run(_info(), {"n": 0})  # committed, then the answer lost: not RunExists on the retry
        proxy.arm()
        store.append("run", [_entry(1), _entry(2)]).result()  # not DuplicateRequest on the retry
        assert proxy.cuts == 2 and store.statistics().reconnects == 2
        with pytest.raises(DuplicateRequest):  # a real duplicate is still one
            store.append("run", [_entry(3, "req-1")]).result()
    finally:
        store.close()
        proxy.close()
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM journal ORDER BY version").fetchall() == [(1,), (2,)]
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_an_activation_retried_after_its_commit_was_lost_never_adopts_another_writers_epoch(
    url: str, postgres_server: PostgresServer
) -> None:
    """Writer A's activation loses its connection before its COMMIT reaches the server (it rolls
    back); writer B activates the run meanwhile and takes the epoch A's transaction had raised
    the run to. A's retry must raise the epoch again, superseding B, not take B's epoch for its
    own: two writers with one epoch both pass every fence."""
    proxy = CommitCutter(postgres_server.port)
    a = PostgresStore(proxy.url(url), retry_for_s=HANG_GUARD_S)
    b = PostgresStore(url)
    try:
        a.create_run(_info(), {"n": 0})
        proxy.hold()  # A's reconnection waits until B has activated
        proxy.arm(deliver=False)
        activating = a.activate_async("run", holder={"writer": "a"})
        assert proxy.cut_done.wait(HANG_GUARD_S)
        epoch_b = b.activate("run", holder={"writer": "b"})
        proxy.release()
        epoch_a = activating.result(timeout=HANG_GUARD_S)
        assert epoch_a > epoch_b, f"A took epoch {epoch_a}, B holds {epoch_b}"
        assert b.activation("run") == (epoch_a, {"writer": "a"})
        a.append("run", [_entry(1)]).result()
        with pytest.raises(WriterFenced):
            b.append("run", [_entry(2)]).result()
    finally:
        proxy.release()
        a.close()
        b.close()
        proxy.close()
    with postgres_server.connect(url) as conn:
        assert conn.execute("SELECT version FROM journal ORDER BY version").fetchall() == [(1,)]


def test_compaction_vacuums_so_a_run_with_retention_reuses_the_space_it_freed(url: str, postgres_server: PostgresServer) -> None:
    """PostgreSQL keeps a deleted row's space until a vacuum has seen it: the store vacuums
    after a compaction (counted by the server: ``last_vacuum`` of the journal table), and the
    journal's next rows then fit in the space the compacted ones left."""
    store = PostgresStore(url)
    try:
        store.create_run(_info(), {})
        pad = {"pad": "x" * 200}
        store.append("run", [_entry(v, payload=pad) for v in range(1, 3001)]).result()
        store.put_checkpoint("run", 2000, {"n": 2000})
        with postgres_server.connect(url) as conn:
            def journal_stats() -> tuple[Any, int]:
                vacuumed, = conn.execute("SELECT last_vacuum FROM pg_stat_user_tables WHERE relid = 'journal'::regclass").fetchone()
                size, = conn.execute("SELECT pg_relation_size('journal')").fetchone()
                return vacuumed, int(size)

            assert journal_stats()[0] is None
            assert store.compact("run") == 2000  # the heap's first pages: the last 1,000 rows keep its size
            deadline = time.monotonic() + HANG_GUARD_S
            while journal_stats()[0] is None:
                assert time.monotonic() < deadline, "no vacuum after the compaction"
                time.sleep(0.05)
            freed_size = journal_stats()[1]
            store.append("run", [_entry(v, payload=pad) for v in range(3001, 4501)]).result()
            assert journal_stats()[1] == freed_size, "the new rows did not reuse the compacted rows' space"
    finally:
        store.close()


def test_an_appends_request_id_check_reads_one_index_entry_per_id_however_long_the_run_is(
    url: str, postgres_server: PostgresServer
) -> None:
    """Counted by the server (``pg_stat_user_tables`` of ``requests``): after 20,000 entries in
    a fresh store (no statistics yet, as in a new deployment's first minute), each append of 64
    entries reads a handful of entries of ``requests`` (of its indexes or its table), not every
    request of the run. A
    join with the array of ids let the planner scan the whole run per append (20,000 and more
    index entries each), a cost growing with the run.

    The server publishes a session's counts at most once a second, so appends go on until the
    counts show at least five of them."""
    store = PostgresStore(url)
    try:
        store.create_run(_info(), {})
        store.append("run", [_entry(v) for v in range(1, 20_001)]).result()
        with postgres_server.connect(url) as conn:
            def counts() -> tuple[int, int]:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                inserted, read = conn.execute(
                    "SELECT n_tup_ins, seq_tup_read + (SELECT COALESCE(SUM(idx_tup_read), 0) FROM pg_stat_user_indexes "
                    "WHERE relid = 'requests'::regclass) FROM pg_stat_user_tables WHERE relid = 'requests'::regclass"
                ).fetchone()
                return int(inserted), int(read)

            version = 20_000
            deadline = time.monotonic() + HANG_GUARD_S
            while (before := counts())[0] < 20_000:  # the big append's counts are published
                assert time.monotonic() < deadline, "the server never published the first append's counts"
                version += 1
                store.append("run", [_entry(version)]).result()  # the session's next transaction publishes them
                time.sleep(0.05)
            while (after := counts())[0] < before[0] + 5 * 64:
                assert time.monotonic() < deadline, "the server never published the appends' counts"
                store.append("run", [_entry(v) for v in range(version + 1, version + 65)]).result()
                version += 64
                time.sleep(0.05)
    finally:
        store.close()
    appends = (after[0] - before[0]) / 64
    read_per_append = (after[1] - before[1]) / appends
    assert read_per_append < 200, f"each append read {read_per_append:.0f} entries of requests"
