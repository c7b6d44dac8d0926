"""The package requires the Python its code is written for."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_package_refuses_python_3_10_whose_asyncio_timeouts_escape_except_timeouterror():
    # The code catches TimeoutError around asyncio.wait_for; before 3.11 that raised
    # asyncio.TimeoutError, a different class, and replicas never retired.
    requires = SpecifierSet(tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"])
    assert "3.11" in requires and "3.12" in requires
    assert "3.10" not in requires
    assert asyncio.TimeoutError is TimeoutError
