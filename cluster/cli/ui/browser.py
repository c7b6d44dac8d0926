"""A headless Chromium for the page's tests, screenshots and load measurements.

Debian's ``chromium`` and ``chromium-driver`` packages, driven by selenium (an optional,
test-only dependency imported here lazily). Selenium is pointed at the installed driver, so
it never downloads a driver or a browser; every profile is fresh.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

__all__ = ["CHROMIUM", "CHROMEDRIVER", "headless_chromium"]

CHROMIUM = os.environ.get("SOLOIST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SOLOIST_CHROMEDRIVER", "/usr/bin/chromedriver")
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--hide-scrollbars")


@contextlib.contextmanager
def headless_chromium(*, width: int = 1400, height: int = 1000, network_log: bool = False) -> Iterator[Any]:
    """A selenium ``WebDriver`` on a fresh headless Chromium; quits and removes its profile after.

    ``network_log`` records Chrome's network events (``driver.get_log("performance")``), used
    to count the bytes each request really received.
    """
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers online
    from selenium import webdriver  # optional: the test extra
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing: install Debian's chromium and chromium-driver packages")
    profile = tempfile.mkdtemp(prefix="soloist-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in _FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument(f"--user-data-dir={profile}")
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
