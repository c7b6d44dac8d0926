"""Fixtures of the runs page tests: a real headless Chromium (Debian's, driven by selenium)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cluster.cli.ui import headless_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver
