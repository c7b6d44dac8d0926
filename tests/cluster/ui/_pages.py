"""Waiting on what the runs page shows, in the real headless Chromium of these tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.webdriver.support.ui import WebDriverWait

from tests._waits import HANG_GUARD_S

__all__ = ["wait_until"]


def wait_until(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    """The first truthy value of ``condition(driver)``, polled as the page updates; a hang
    fails with ``what`` after ``HANG_GUARD_S``."""
    return WebDriverWait(driver, HANG_GUARD_S, poll_frequency=0.1).until(condition, message=what)
