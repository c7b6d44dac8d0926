"""The runs page of ``soloist ui``: watch runs live, read their history, answer approvals.

A Starlette application served by uvicorn; every asset (HTML, one script, one stylesheet)
ships in ``static/``, nothing is fetched from elsewhere. Read-only unless actions are
allowed; actions need the server's token and come only from its own page.
"""

from cluster.cli_ui.exceptions import (
    ActionRefused,
    ActionsDisabled,
    BadToken,
    CrossSiteRequest,
    RunNotFoundInUi,
    UiError,
    UnsafeBind,
)
from cluster.cli_ui.security import TOKEN_ENV, TOKEN_HEADER
from cluster.cli_ui.server import DEFAULT_PORT, UiServer
from cluster.cli_ui.source import RunSource

__all__ = [
    "UiServer",
    "RunSource",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "TOKEN_HEADER",
    "UiError",
    "ActionsDisabled",
    "ActionRefused",
    "BadToken",
    "CrossSiteRequest",
    "RunNotFoundInUi",
    "UnsafeBind",
]
