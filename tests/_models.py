"""The small state and payload models many tests share.

A run's state must be a pydantic model the run's workers can import; these live in one
importable module so every test (and every driver subprocess) names the same class.
"""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["Empty", "Tally"]


class Empty(BaseModel):
    """A state or input with no fields: for runs whose state the test does not read."""


class Tally(BaseModel):
    """A counter state: tests count their writes in ``n``."""

    n: int = 0
