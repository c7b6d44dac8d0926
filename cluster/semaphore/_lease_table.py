"""The semaphore's lease table: a pure state machine, no Ray and no asyncio.

``cluster.semaphore._service`` wraps it (one per scope) in a lock and an actor; tests drive it with a fake
clock. Time is always passed in as ``now`` (seconds on one monotonic clock).

Two kinds of lease:
  - plain: alive while renewed; ``ttl_s`` after the last renewal it expires and its permit
    goes to the next waiter (a holder that died or stalled stops counting).
  - guarded: held by an actor that runs the work the permit admits (a subagent replica).
    A guarded lease that misses its renewals does *not* expire on the clock: it becomes a
    suspect, and the actor probes its holder through Ray. Only the answer "this process
    does not hold it" (a restarted replica) or Ray's verdict that the holder died frees it.
    A paused holder pauses its work too, and when it resumes its work goes on: its permit
    must still be counted, however long the pause. A holder someone reports lost
    (``suspect``) is probed at once instead of after its renewals: the report only hastens
    the question, the answer still comes from Ray.

Every grant gets a ``generation`` (strictly increasing per table, also across recovery):
the fencing token a holder checks its copy against before it reuses a lease.

A table may also have a budget (``BudgetWindow``: requests and tokens per sliding window):
the head of the queue is then granted only when the window has room for it too, each grant
is charged, and each release settles the charge with the usage it reports.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from cluster.semaphore._budget import BudgetWindow

__all__ = ["LeaseTable", "MAX_TOMBSTONES", "Outcome", "SemaphoreState"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

SemaphoreState = Literal["serving", "recovering"]
Outcome = Literal["granted", "parked", "timeout", "withdrawn"]
"""What became of an acquire request: granted; still parked; withdrawn after its timeout;
or withdrawn by a release (or never to be granted, its id being released already)."""

MAX_TOMBSTONES = 100_000
"""How many released ids the table remembers, to refuse late requests and renewals."""


@dataclass
class _LeaseRecord:
    """A granted lease; ``expires_at`` is on the actor's monotonic clock."""

    lease_id: str
    holder: str
    limit: int
    acquired_at: float
    expires_at: float
    generation: int = 0
    # Guarded: expiry makes it a suspect to probe, never frees it on the clock alone.
    guarded: bool = False
    # A probe of the holder is out (guarded leases only); cleared by its answer.
    probing: bool = False


@dataclass
class _Waiter:
    """A parked acquire request."""

    lease_id: str
    holder: str
    limit: int
    parked_at: float
    guarded: bool = False
    # Tokens to reserve from the budget (None: the budget's default reservation).
    tokens: int | None = None


class LeaseTable:
    """The semaphore's pure state machine (no Ray, no asyncio, not thread-safe).

    States:
      - ``serving``: grants permits FIFO while ``held < min(head.limit, permits)``.
      - ``recovering``: after an actor restart, for ``ttl_s`` and for as long as the
        service holds it (``held_open``: holders of guarded leases from before the restart
        have not answered yet): grants nothing; renewals re-register the leases they name,
        so leases from before the restart are counted.

    Every method takes ``now`` and first calls ``_advance`` (expiry, state change, grants);
    methods that can decide parked requests return them as ``(lease_id, outcome)`` pairs.
    """

    def __init__(
        self, scope: str, permits: int, ttl_s: float, *, now: float, recovering: bool, held_open: bool = False,
        budget: BudgetWindow | None = None,
    ) -> None:
        self.scope = scope
        self.permits = permits
        self.ttl_s = ttl_s
        # Requests and tokens per window (None: the cap alone decides).
        self.budget = budget
        # Since when the head of the queue has been held back by the budget alone (None: it is not).
        self._blocked_since: float | None = None
        # The latest ``now`` any method was given (statistics read the budget as of then).
        self._last_now = now
        # The budget wait of the latest grants (lease_id -> seconds), read once by the service.
        self._budget_waits: dict[str, float] = {}
        self._state: SemaphoreState = "recovering" if recovering else "serving"
        # Meaningful only while recovering: when service resumes.
        self._recovering_until = now + ttl_s if recovering else now
        # Recovery also waits for the service to let it end (see ``end_hold``).
        self._held_open = recovering and held_open
        # Granted, unexpired, unreleased leases; len() is `held`; disjoint from _waiters.
        self._leases: dict[str, _LeaseRecord] = {}
        # Parked requests in arrival order; the head is served first (FIFO, no barging).
        self._waiters: OrderedDict[str, _Waiter] = OrderedDict()
        # Ids released, withdrawn, timed out or expired: a late request or renewal for one
        # never grants. Bounded; the oldest are forgotten first.
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        self._granted_total = 0
        self._released_total = 0
        self._expired_total = 0
        # The generation of the latest grant; every grant takes the next one.
        self._generation = 0
        # Peak of len(_leases) since creation or the last reset_peak().
        self._max_held = 0

    @property
    def state(self) -> SemaphoreState:
        """The current state (see the class docstring)."""
        return self._state

    def request(
        self, lease_id: str, holder: str, limit: int, now: float, *, guarded: bool = False, tokens: int | None = None
    ) -> tuple[Outcome, list[tuple[str, Outcome]]]:
        """Grant, park, or refuse a request; idempotent per ``lease_id``. ``tokens``: what to
        reserve from the budget (None: its default reservation)."""
        decided = self._advance(now)
        if lease_id in self._leases:
            return "granted", decided
        if lease_id in self._tombstones:
            return "withdrawn", decided
        if lease_id not in self._waiters:
            self._waiters[lease_id] = _Waiter(lease_id, holder, limit, now, guarded, tokens)
        decided += self._grant_waiters(now)
        mine = [outcome for lid, outcome in decided if lid == lease_id]
        others = [(lid, outcome) for lid, outcome in decided if lid != lease_id]
        return (mine[0] if mine else "parked"), others

    def give_up(self, lease_id: str, now: float) -> tuple[Outcome, list[tuple[str, Outcome]]]:
        """A parked request timed out: withdraw it, unless it was granted meanwhile."""
        decided = self._advance(now)
        if lease_id in self._leases:
            return "granted", decided
        if self._left_queue(lease_id) is None:
            return "withdrawn", decided
        self._bury(lease_id)
        return "timeout", decided + self._grant_waiters(now)

    def release(
        self, lease_id: str, now: float, used_tokens: int | None = None
    ) -> tuple[bool, list[tuple[str, Outcome]]]:
        """Free a granted lease or withdraw a parked request; False when neither exists.
        ``used_tokens``: the usage the holder's work reported (settles its budget charge)."""
        decided = self._advance(now)
        self._bury(lease_id)
        if self._leases.pop(lease_id, None) is not None:
            self._released_total += 1
            self._budget_waits.pop(lease_id, None)
            if self.budget is not None:
                self.budget.settle(lease_id, used_tokens, now)
        elif self._left_queue(lease_id) is not None:
            decided.append((lease_id, "withdrawn"))
        else:
            return False, decided
        return True, decided + self._grant_waiters(now)

    def generation_of(self, lease_id: str) -> int | None:
        """The generation of a held lease, or None when it is not held."""
        record = self._leases.get(lease_id)
        return None if record is None else record.generation

    def renew(
        self, leases: Iterable[tuple[str, str, int] | tuple[str, str, int, int, bool]], now: float
    ) -> tuple[list[bool], list[tuple[str, Outcome]]]:
        """Extend each ``(lease_id, holder, limit[, generation, guarded])``; while
        recovering, re-register it (with its generation, so fencing survives a restart)."""
        decided = self._advance(now)
        results: list[bool] = []
        for item in leases:
            lease_id, holder, limit = item[0], item[1], item[2]
            generation = item[3] if len(item) > 3 else 0
            guarded = bool(item[4]) if len(item) > 4 else False
            record = self._leases.get(lease_id)
            if record is not None and (generation == 0 or record.generation == generation):
                record.expires_at = now + self.ttl_s
                record.probing = False
                results.append(True)
            elif (
                record is None
                and self._state == "recovering"
                and lease_id not in self._tombstones
                and lease_id not in self._waiters
            ):
                self._generation = max(self._generation, generation)
                self._leases[lease_id] = _LeaseRecord(
                    lease_id, holder, limit, now, now + self.ttl_s, generation, guarded
                )
                self._max_held = max(self._max_held, len(self._leases))
                results.append(True)
                logger.info(
                    "semaphore %r: re-registered lease %s of %s after restart (%d held)",
                    self.scope, lease_id, holder, len(self._leases), extra=_LOG_EXTRA,
                )
                if len(self._leases) > self.permits:
                    logger.warning(
                        "semaphore %r: %d leases re-registered, more than %d permits (a "
                        "holder renewed a lease that had expired); no grants until below",
                        self.scope, len(self._leases), self.permits, extra=_LOG_EXTRA,
                    )
            else:
                results.append(False)
        return results, decided

    def end_hold(self, now: float) -> list[tuple[str, Outcome]]:
        """The service heard from every holder it waited for: recovery ends with its window."""
        self._held_open = False
        return self._advance(now)

    def tick(self, now: float) -> list[tuple[str, Outcome]]:
        """Expire leases, end recovery when due, grant waiters."""
        return self._advance(now)

    def due_probes(self, now: float) -> dict[str, list[str]]:
        """Guarded leases past their expiry with no probe out, by holder; marks them probing."""
        self._advance(now)
        due: dict[str, list[str]] = {}
        for record in self._leases.values():
            if record.guarded and not record.probing and record.expires_at <= now:
                record.probing = True
                due.setdefault(record.holder, []).append(record.lease_id)
        return due

    def suspect(self, holders: Iterable[str], now: float) -> tuple[int, list[tuple[str, Outcome]]]:
        """Someone reports ``holders`` lost: make their guarded leases due for a probe now
        (``due_probes``). Frees nothing: an alive holder's answer renews them. Returns how
        many leases will be probed."""
        decided = self._advance(now)
        wanted = set(holders)
        count = 0
        for record in self._leases.values():
            if record.guarded and record.holder in wanted:
                record.expires_at = min(record.expires_at, now)
                count += 1
        return count, decided

    def probe_answered(
        self, lease_id: str, alive: bool | None, now: float
    ) -> list[tuple[str, Outcome]]:
        """The holder's answer about a suspect: True (it holds the lease: renewed), False
        (it does not, or Ray says it died: freed), None (no verdict yet: probe again later)."""
        decided = self._advance(now)
        record = self._leases.get(lease_id)
        if record is None:
            return decided
        record.probing = False
        if alive is None:
            return decided
        if alive:
            record.expires_at = now + self.ttl_s
            return decided
        del self._leases[lease_id]
        self._bury(lease_id)
        self._expired_total += 1
        self._budget_waits.pop(lease_id, None)
        if self.budget is not None:
            self.budget.settle(lease_id, None, now)
        logger.warning(
            "semaphore %r: lease %s of %s freed: its holder no longer holds it (died or restarted)",
            self.scope, lease_id, record.holder, extra=_LOG_EXTRA,
        )
        return decided + self._grant_waiters(now)

    def holders(self) -> set[str]:
        """The holders of every held lease and parked request."""
        return {r.holder for r in self._leases.values()} | {w.holder for w in self._waiters.values()}

    @property
    def waiting(self) -> int:
        """How many requests are parked."""
        return len(self._waiters)

    @property
    def held(self) -> int:
        """How many leases are held."""
        return len(self._leases)

    def budget_wake_at(self, now: float) -> float | None:
        """When the budget may let the waiting head of the queue through (None: nothing waits
        on the budget, or only a release can make room)."""
        if self.budget is None or self._blocked_since is None or not self._waiters:
            return None
        return self.budget.next_room_at(now)

    def take_budget_wait(self, lease_id: str) -> float:
        """Seconds the grant of ``lease_id`` was held back by the budget (read once; 0.0 after)."""
        return self._budget_waits.pop(lease_id, 0.0)

    def reset_peak(self) -> None:
        """Restart the peak from the current number of held leases."""
        self._max_held = len(self._leases)

    def statistics(self) -> dict[str, object]:
        """Report the table (the fields of ``SemaphoreStatistics``)."""
        return {
            "scope": self.scope,
            "permits": self.permits,
            "held": len(self._leases),
            "waiting": len(self._waiters),
            "granted_total": self._granted_total,
            "released_total": self._released_total,
            "expired_total": self._expired_total,
            "max_held": self._max_held,
            "state": self._state,
            "ttl_s": self.ttl_s,
            "generation": self._generation,
            "suspects": sum(1 for r in self._leases.values() if r.probing),
            "budget": None if self.budget is None else self.budget.statistics(self._last_now),
        }

    def _may_grant(self, limit: int) -> bool:
        """The one guard for granting: serving, and below the request's effective cap."""
        return self._state == "serving" and len(self._leases) < min(limit, self.permits)

    def _advance(self, now: float) -> list[tuple[str, Outcome]]:
        self._last_now = now
        if self._state == "recovering" and now >= self._recovering_until and not self._held_open:
            self._state = "serving"
            if self.budget is not None:
                # Charges of leases from before the restart that nobody re-registered: their
                # work may have reached the endpoint, so they count a window more from now.
                self.budget.settle_unheld(set(self._leases), now)
            logger.info(
                "semaphore %r: recovery window over, serving with %d leases re-registered",
                self.scope, len(self._leases), extra=_LOG_EXTRA,
            )
        for lease_id in [lid for lid, rec in self._leases.items() if rec.expires_at <= now and not rec.guarded]:
            record = self._leases.pop(lease_id)
            self._bury(lease_id)
            self._expired_total += 1
            self._budget_waits.pop(lease_id, None)
            if self.budget is not None:
                self.budget.settle(lease_id, None, now)
            logger.warning(
                "semaphore %r: lease %s of %s expired (not renewed for %.1fs); permit recovered",
                self.scope, lease_id, record.holder, self.ttl_s, extra=_LOG_EXTRA,
            )
        return self._grant_waiters(now)

    def _grant_waiters(self, now: float) -> list[tuple[str, Outcome]]:
        granted: list[tuple[str, Outcome]] = []
        while self._waiters:
            head = next(iter(self._waiters.values()))
            if not self._may_grant(head.limit):
                break
            if self.budget is not None:
                if not self.budget.has_room(head.tokens, now):
                    if self._blocked_since is None:
                        self._blocked_since = now
                    break
                waited = 0.0 if self._blocked_since is None else now - self._blocked_since
                self._blocked_since = None
                self.budget.note_wait(waited)
                self.budget.charge(head.lease_id, head.tokens, now)
                self._budget_waits[head.lease_id] = waited
            del self._waiters[head.lease_id]
            self._generation += 1
            self._leases[head.lease_id] = _LeaseRecord(
                head.lease_id, head.holder, head.limit, now, now + self.ttl_s,
                self._generation, head.guarded,
            )
            self._granted_total += 1
            self._max_held = max(self._max_held, len(self._leases))
            granted.append((head.lease_id, "granted"))
        return granted

    def _left_queue(self, lease_id: str) -> _Waiter | None:
        """Take a parked request out of the queue; a new head starts its budget wait afresh."""
        if self._waiters and next(iter(self._waiters)) == lease_id:
            self._blocked_since = None
        return self._waiters.pop(lease_id, None)

    def _bury(self, lease_id: str) -> None:
        self._tombstones[lease_id] = None
        self._tombstones.move_to_end(lease_id)
        while len(self._tombstones) > MAX_TOMBSTONES:
            self._tombstones.popitem(last=False)
