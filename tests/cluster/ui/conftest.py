"""Fixtures of the runs page tests: a real headless Chromium driven by selenium.

The browser is Debian's ``chromium`` with its ``chromedriver`` (``.ci/run`` installs both);
selenium is pointed at them explicitly, so it never downloads a driver or a browser.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("SOLOIST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SOLOIST_CHROMEDRIVER", "/usr/bin/chromedriver")
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--window-size=1400,1000")


def start_browser() -> tuple[Any, str]:
    """A fresh headless Chromium (its own profile directory) and that directory."""
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers online
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing: install Debian's chromium and chromium-driver (see .ci/run)")
    profile = tempfile.mkdtemp(prefix="soloist-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in _FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver, profile


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver, profile = start_browser()
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
