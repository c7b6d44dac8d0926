"""A scope's budget: requests and tokens per sliding window, as a pure object (no Ray, no clock).

``Budget`` is the configuration (e.g. ``Budget.per_minute(requests=500, tokens=30_000)``);
``BudgetWindow`` is the accounting the semaphore's lease table consults before it grants a
permit. Time is always passed in as ``now`` (one monotonic clock, seconds).

How a grant is charged (the choice, and why):
  - at grant, a lease is charged one request and its *reservation*: the tokens its acquirer
    estimated, or the scope's ``reserve_tokens`` when it gave none. Providers count a
    request against their limit when it arrives, from its prompt and its ``max_tokens``,
    before anyone knows the usage; a reservation made before the request is sent is the
    only way never to be refused by them.
  - at release, the charge is corrected to the tokens the response reported (fewer frees
    room at once; more holds the next grants back longer).
  - a charge counts from its grant until ``window_s`` after its release. The request reaches
    the endpoint somewhere between the two, so whatever the endpoint counts in any window
    of ``window_s`` the budget counted too, whatever the delays in between.
A grant waits (never fails) until the window has room for the head of the queue; a
reservation larger than the whole budget could never be granted and is refused at once
(``BudgetConfigError``), and so is a budget that is not a positive number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from coordinators.exceptions import SoloistError

__all__ = ["Budget", "BudgetConfigError", "BudgetWindow", "BudgetStatistics", "WindowEntry", "budget_of"]


class BudgetConfigError(SoloistError, ValueError):
    """Raised when a budget is not usable: a limit that is not a positive int, a window that
    is not a positive number of seconds, or a reservation that exceeds the whole budget (it
    could never be granted). The message names the field and the value."""


class Budget(BaseModel):
    """How much one semaphore scope may use per sliding window of ``window_s`` seconds.

    ``requests``: grants per window (None: no limit). ``tokens``: tokens per window, counted
    from the usage responses report (None: no limit). ``reserve_tokens``: what a grant
    reserves when its acquirer gives no estimate (corrected at release to the usage
    reported). Build it with ``Budget.per_minute(requests=..., tokens=...)`` or directly.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int | None = None
    tokens: int | None = None
    window_s: float = 60.0
    reserve_tokens: int = 0

    @field_validator("requests", "tokens")
    @classmethod
    def _positive_limit(cls, value: int | None) -> int | None:
        if value is not None and (isinstance(value, bool) or value <= 0):
            raise ValueError(f"must be a positive int or None, got {value!r}")
        return value

    @field_validator("window_s")
    @classmethod
    def _positive_window(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a finite number of seconds > 0, got {value!r}")
        return float(value)

    @field_validator("reserve_tokens")
    @classmethod
    def _reserve(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be an int >= 0, got {value!r}")
        return value

    @classmethod
    def per_minute(cls, *, requests: int | None = None, tokens: int | None = None, reserve_tokens: int = 0) -> Budget:
        """Requests and tokens per minute (a 60-second sliding window)."""
        return budget_of(requests=requests, tokens=tokens, window_s=60.0, reserve_tokens=reserve_tokens)

    def floor_s(self, *, requests: int, tokens: int) -> float:
        """The least wall time ``requests`` requests using ``tokens`` tokens in all can take
        under this budget: the first window's worth goes at once, each further one a window later."""
        windows = 0.0
        if self.requests is not None:
            windows = max(windows, math.ceil(requests / self.requests) - 1)
        if self.tokens is not None:
            windows = max(windows, math.ceil(tokens / self.tokens) - 1)
        return max(0.0, windows) * self.window_s


def budget_of(**fields: object) -> Budget:
    """``Budget(**fields)``, with a ``BudgetConfigError`` naming every bad field."""
    try:
        budget = Budget.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])} {e.get('ctx', {}).get('error', e['msg'])}"
                             for e in exc.errors())
        raise BudgetConfigError(f"invalid Budget: {problems}") from None
    if budget.tokens is not None and budget.reserve_tokens > budget.tokens:
        raise BudgetConfigError(f"invalid Budget: reserve_tokens={budget.reserve_tokens} exceeds tokens={budget.tokens} "
                                "per window (no grant could ever be made)")
    return budget


class BudgetStatistics(BaseModel, frozen=True):
    """A point-in-time report of one scope's budget window."""

    budget: Budget
    requests_in_window: int
    tokens_in_window: int
    held: int
    granted_total: int
    tokens_total: int
    waited_s_total: float


@dataclass
class WindowEntry:
    """One grant's charge. ``released_at`` None: still held (it counts until released, then
    for ``window_s`` more)."""

    key: str
    granted_at: float
    tokens: int
    requests: int = 1
    released_at: float | None = None
    settled: bool = False  # the tokens are the usage reported (not a reservation)


class BudgetWindow:
    """The charges of one scope's grants within its sliding window (see the module docstring).

    Not thread-safe: the lease table's owner serialises access. Every change is also noted
    for ``drain_changes``, so the service can keep a copy outside its memory.
    """

    def __init__(self, budget: Budget, entries: list[WindowEntry] | None = None) -> None:
        self.budget = budget
        # key -> charge; held ones and those released within the last window.
        self._entries: dict[str, WindowEntry] = {e.key: e for e in entries or []}
        # Changed since the last drain: keys written (the entry is in _entries) or removed.
        self._changed: set[str] = set()
        self._removed: set[str] = set()
        self._granted_total = 0
        self._tokens_total = 0
        self._waited_s_total = 0.0

    def reservation(self, tokens: int | None) -> int:
        """What a grant reserves: the estimate given, else the budget's ``reserve_tokens``."""
        return self.budget.reserve_tokens if tokens is None else tokens

    def check_fits(self, tokens: int | None) -> None:
        """``BudgetConfigError`` when a reservation of ``tokens`` could never be granted."""
        reserved = self.reservation(tokens)
        if self.budget.tokens is not None and reserved > self.budget.tokens:
            raise BudgetConfigError(f"a request reserving {reserved} tokens can never be granted: the budget allows "
                                    f"{self.budget.tokens} tokens per {self.budget.window_s:g}s; lower the estimate "
                                    "(or max_tokens) or raise the budget")

    def has_room(self, tokens: int | None, now: float) -> bool:
        """Whether a grant reserving ``tokens`` fits in the window now."""
        self.prune(now)
        requests, used = self._in_window()
        if self.budget.requests is not None and requests + 1 > self.budget.requests:
            return False
        if self.budget.tokens is not None and used + self.reservation(tokens) > self.budget.tokens:
            # An oversized reservation goes alone once the window is empty (check_fits
            # refuses those up front; this keeps a table that holds one from stalling).
            return requests == 0
        return True

    def next_room_at(self, now: float) -> float | None:
        """When the next released charge leaves the window (None: none will; only a release
        of a held lease can make room)."""
        ends = [e.released_at + self.budget.window_s for e in self._entries.values() if e.released_at is not None]
        later = [end for end in ends if end > now]
        return min(later) if later else None

    def charge(self, key: str, tokens: int | None, now: float) -> None:
        """A lease was granted: charge it one request and its reservation."""
        entry = WindowEntry(key=key, granted_at=now, tokens=self.reservation(tokens))
        self._entries[key] = entry
        self._granted_total += 1
        self._note(key)

    def settle(self, key: str, used_tokens: int | None, now: float) -> bool:
        """A lease was released (or freed): its charge counts ``window_s`` more from now,
        corrected to ``used_tokens`` when the usage is known. False when nothing was charged."""
        entry = self._entries.get(key)
        if entry is None or entry.released_at is not None:
            return False
        entry.released_at = now
        if used_tokens is not None:
            entry.tokens = max(0, int(used_tokens))
            entry.settled = True
        self._tokens_total += entry.tokens
        self._note(key)
        return True

    def settle_unheld(self, held: set[str], now: float) -> int:
        """Settle every charge still open whose lease is not in ``held`` (after a restart: the
        holders that never came back); each counts ``window_s`` more from now. Returns how many."""
        stale = [k for k, e in self._entries.items() if e.released_at is None and k not in held]
        for key in stale:
            self.settle(key, None, now)
        return len(stale)

    def note_wait(self, seconds: float) -> None:
        """A grant was held back by this budget for ``seconds``."""
        self._waited_s_total += max(0.0, seconds)

    def prune(self, now: float) -> None:
        """Forget the charges released more than ``window_s`` ago."""
        horizon = now - self.budget.window_s
        for key in [k for k, e in self._entries.items() if e.released_at is not None and e.released_at <= horizon]:
            del self._entries[key]
            self._changed.discard(key)
            self._removed.add(key)

    def drain_changes(self) -> tuple[list[WindowEntry], list[str]]:
        """The charges written and the keys removed since the last drain (for a durable copy)."""
        written = [self._entries[k] for k in sorted(self._changed) if k in self._entries]
        removed = sorted(self._removed)
        self._changed.clear()
        self._removed.clear()
        return written, removed

    def entries(self) -> list[WindowEntry]:
        """Every charge in the window, oldest grant first."""
        return sorted(self._entries.values(), key=lambda e: e.granted_at)

    def statistics(self, now: float) -> BudgetStatistics:
        self.prune(now)
        requests, tokens = self._in_window()
        return BudgetStatistics(
            budget=self.budget, requests_in_window=requests, tokens_in_window=tokens,
            held=sum(1 for e in self._entries.values() if e.released_at is None),
            granted_total=self._granted_total, tokens_total=self._tokens_total, waited_s_total=self._waited_s_total,
        )

    def _in_window(self) -> tuple[int, int]:
        entries = self._entries.values()
        return sum(e.requests for e in entries), sum(e.tokens for e in entries)

    def _note(self, key: str) -> None:
        self._changed.add(key)
        self._removed.discard(key)
