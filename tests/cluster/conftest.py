"""The store fixtures: one storage suite that runs on every kind of store.

``store`` is a fresh store of the kind ``store_kind`` names: ``sqlite`` (a new file) and
``postgres`` (a new schema on the session's ``postgres_server``, see ``tests/conftest.py``)
by default; a module adds ``memory`` by defining its own ``store_kind`` fixture over
``ALL_KINDS``.
``store_location`` opens more stores on the same file or database (a reopen, a second
writer) and reaches the rows behind the store's back (``tests/_stores.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._postgres import PostgresServer
from tests._stores import SQL_KINDS, StoreLocation


@pytest.fixture(params=SQL_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_location(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreLocation]:
    if store_kind == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        where = StoreLocation("postgres", server.fresh_url(), server)
    elif store_kind == "sqlite":
        where = StoreLocation("sqlite", str(tmp_path / "deep" / "store.sqlite"))
    else:
        where = StoreLocation("memory", None)
    try:
        yield where
    finally:
        where.close_all()


@pytest.fixture
def store(store_location: StoreLocation) -> Any:
    """A fresh, empty store of ``store_kind``; closed after the test."""
    return store_location.open()
