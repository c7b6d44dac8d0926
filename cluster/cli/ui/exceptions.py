"""Errors of the web page's server, each answered to the page with its message."""

from __future__ import annotations

from coordinators import SoloistError

__all__ = ["UiError", "ActionRefused", "ActionsDisabled", "BadToken", "CrossSiteRequest", "RunNotFoundInUi", "UnsafeBind"]


class UiError(SoloistError, RuntimeError):
    """Base class of the page server's own errors."""


class ActionsDisabled(UiError):
    """Raised when an action reaches a server started without ``--allow-actions``."""


class BadToken(UiError):
    """Raised when an action carries no token, or not the server's token."""


class CrossSiteRequest(UiError):
    """Raised when a request comes from another site (``Origin``/``Host`` not this server's)."""


class ActionRefused(UiError):
    """Raised when an action cannot be done from this server (e.g. no capability to write)."""


class RunNotFoundInUi(UiError, LookupError):
    """Raised when the page asks for a run that is neither live nor in the server's store."""


class UnsafeBind(SoloistError, ValueError):
    """Raised when the server is asked to listen beyond loopback without the explicit flag."""
