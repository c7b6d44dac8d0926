"""Every command's ``--store`` takes a SQLite file or a ``postgresql://`` URL: ``soloist status``
lists the runs and prints the store's health (never a password), ``soloist gc`` collects
finished runs, the runs page lists them; a server that does not answer is reported, with
exit code 1."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest

from cluster.cli import main
from cluster.cli.ui import RunSource, UiServer
from cluster.storage import RunInfo, redact
from tests._postgres import USER_WITH_PASSWORD, PostgresServer
from tests._stores import StoreLocation
from tests._waits import HANG_GUARD_S


def _stored(where: StoreLocation, *names: str, finished_at: float | None = None) -> None:
    store = where.open()
    for name in names:  # each with a caller of its own, long enough to be stored once for many runs
        store.create_run(RunInfo(name=name, state_type="m.S", created_at=time.time(), owner_token="tok",
                                 metadata={"caller": f"{name} " * 400}), {"n": 0})
        if finished_at is not None:
            store.update_run_metadata(name, {"status": "complete", "finished_at": finished_at})
    store.close()


def test_status_lists_the_stored_runs_and_the_store_health(store_location: StoreLocation,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _stored(store_location, "first", "second")
    assert main(["status", "--store", str(store_location.location), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in document["runs"]) == ["first", "second"]
    health = document["store_health"]
    assert health["reachable"] is True and health["error"] is None
    assert health["server"].startswith("SQLite" if store_location.kind == "sqlite" else "PostgreSQL")
    assert main(["status", "--store", str(store_location.location)]) == 0
    assert f"store {document['store']}: reachable, {health['server']}" in capsys.readouterr().out


def test_gc_collects_finished_runs_of_any_store(store_location: StoreLocation, capsys: pytest.CaptureFixture[str]) -> None:
    _stored(store_location, "old", finished_at=time.time() - 30 * 86_400)
    _stored(store_location, "open")
    assert main(["gc", "--store", str(store_location.location), "--older-than", "7d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["removed"] == ["old"] and report["kept"] == ["open"] and report["values_removed"] == 1
    assert store_location.count("SELECT COUNT(*) FROM runs") == store_location.count("SELECT COUNT(*) FROM blobs") == 1
    _stored(store_location, "old-2", finished_at=time.time() - 30 * 86_400)
    assert main(["gc", "--store", str(store_location.location), "--older-than", "7d"]) == 0
    assert "removed 1 finished run(s): old-2; kept 1; 1 stored value(s) no run refers to" in capsys.readouterr().out


def test_status_of_a_url_with_a_password_never_prints_the_password(postgres_server: PostgresServer,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    user, password = USER_WITH_PASSWORD
    url = postgres_server.fresh_url().replace("postgresql://postgres@", f"postgresql://{user}:{password}@")
    assert main(["status", "--store", url, "--json"]) == 0
    assert main(["status", "--store", url]) == 0
    out = capsys.readouterr()
    assert password not in out.out + out.err
    assert f"{user}:***@" in out.out


def test_status_of_a_server_that_does_not_answer_reports_it_and_exits_one(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("SOLOIST_STORE_RETRY_S", "0.2")
    assert main(["status", "--store", f"postgresql://me:hunter2@127.0.0.1:{port}/db"]) == 1
    out = capsys.readouterr().out
    assert f"store postgresql://me:***@127.0.0.1:{port}/db: UNREACHABLE" in out and "hunter2" not in out


def test_the_runs_page_lists_a_postgres_store_and_names_it_without_the_password(postgres_server: PostgresServer) -> None:
    user, password = USER_WITH_PASSWORD
    url = postgres_server.fresh_url().replace("postgresql://postgres@", f"postgresql://{user}:{password}@")
    _stored(StoreLocation("postgres", url, postgres_server), "on-the-server")
    server = UiServer(RunSource(store=url, live=False), port=0).start()
    try:
        with urllib.request.urlopen(server.url + "api/runs", timeout=HANG_GUARD_S) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    page = json.loads(text)
    assert [r["name"] for r in page["runs"]] == ["on-the-server"]
    assert page["store"] == redact(url) and password not in text
