"""Objects stored as text: cloudpickle, then base64, so they fit in JSON records.

Owns the one encoding used for everything soloist stores by value rather than by data
(a run's state class and caller, a coordinator hosted by an agent).
"""

from __future__ import annotations

import base64
from typing import Any

import cloudpickle

__all__ = ["pickled", "unpickled"]


def pickled(value: Any) -> str:
    """``value`` (anything cloudpickle can pickle) as JSON-clean ASCII text."""
    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def unpickled(text: str) -> Any:
    """The object ``pickled`` turned into ``text`` (raises what cloudpickle/base64 raise)."""
    return cloudpickle.loads(base64.b64decode(text))
