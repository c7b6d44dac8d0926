"""The runs page of ``soloist ui``: watch runs live, read their history, answer approvals.

A Starlette application served by uvicorn; every asset (HTML, one script, one stylesheet)
ships in ``static/``, nothing is fetched from elsewhere. Read-only unless actions are
allowed; actions need the server's token and come only from its own page.
"""

from cluster.cli.ui.browser import headless_chromium
from cluster.cli.ui.command import add_ui_command, start_run_page
from cluster.cli.ui.exceptions import (
    ActionRefused,
    ActionsDisabled,
    BadToken,
    CrossSiteRequest,
    RunNotFoundInUi,
    UiError,
    UnsafeBind,
)
from cluster.cli.ui.security import TOKEN_ENV, TOKEN_HEADER, Guard, check_bind
from cluster.cli.ui.server import DEFAULT_PORT, UiServer
from cluster.cli.ui.source import RunSource
from cluster.cli.ui.timeline import (
    MAX_DATA_CHARS,
    MAX_TRANSITIONS,
    entry_from_change,
    entry_from_journal,
    reasoning_trail,
    run_status,
)

__all__ = [
    "add_ui_command",
    "start_run_page",
    "UiServer",
    "RunSource",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "TOKEN_HEADER",
    "Guard",
    "check_bind",
    "entry_from_change",
    "entry_from_journal",
    "reasoning_trail",
    "run_status",
    "MAX_TRANSITIONS",
    "MAX_DATA_CHARS",
    "headless_chromium",
    "UiError",
    "ActionsDisabled",
    "ActionRefused",
    "BadToken",
    "CrossSiteRequest",
    "RunNotFoundInUi",
    "UnsafeBind",
]
