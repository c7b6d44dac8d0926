"""A parallel handoff's lanes, seen from its driver: where each item goes, and the
rebalancing at the end of the batch.

A batch with more items than its cap runs ``cap`` lanes, each on one replica, and keeps up to
``LANE_DEPTH`` items in flight per lane: while an item runs, the next one already waits in
the replica (``actors.handoffs._lanes``) and starts the moment the first one has returned,
instead of one reply and one new request later. Measured on a 2-core machine, that hand-over
was about 6 ms of every 100 ms wave of a sleeping fan-out.

An item queued behind a long one could wait while another lane has nothing left to do (at
the end of a batch whose items differ in length). So whenever a lane goes idle and no item
is left to start, the driver withdraws an item still waiting behind another, and its own
worker sends it again, to the idle lane. A replica only withdraws an item that has not
started, so nothing runs twice.

The ``Fanout`` is the one owner of the lane-to-replica binding: a lane with items in flight
is bound to the pool slot of its first one, and ``slot_of`` hands that slot to the pool's
``pick`` with how many of the lane's items are there (``on_slot``); the pool keeps the lane
there unless other calls crowd that replica and a started one has room (it knows nothing
else of lanes).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from typing import Any

import ray

from cluster import metrics

__all__ = ["Fanout", "LANE_DEPTH"]

_log = logging.getLogger(__name__)

#: Items in flight per lane: the one running and the one waiting behind it.
LANE_DEPTH = 2


class Fanout:
    """The lanes of one ``parallel_handoff`` batch of ``orchestrator``'s run (used from its
    event loop only).

    The run's in-flight gauge counts busy lanes here, not items sent: a lane runs one body
    at a time, and an item waiting behind it is not running.
    """

    def __init__(self, lanes: int, orchestrator: str) -> None:
        self._orchestrator = orchestrator
        batch = secrets.token_hex(6)
        self._batch = batch
        self._lanes = [f"{batch}:{i}" for i in range(lanes)]
        # Per lane, the items sent and not yet answered, oldest first: (ticket, pool, slot,
        # replica). A lane's items in flight of one pool are on one slot, unless it moved off
        # a crowded replica: the binding
        # (slot and replica are None while the item waits for a started replica).
        self._sent: dict[str, list[tuple[str, str, int | None, Any]]] = {lane: [] for lane in self._lanes}
        self._tickets = itertools.count()
        self._stealing = 0
        self._withdrawn = 0

    @property
    def withdrawn(self) -> int:
        """How many waiting items were taken back and sent to an idle lane."""
        return self._withdrawn

    def route(self) -> tuple[str, str]:
        """The lane for the next send (the one with the fewest items in flight, the first
        such) and a fresh ticket for it."""
        lane = min(self._lanes, key=lambda name: len(self._sent[name]))
        return lane, f"{self._batch}/{next(self._tickets)}"

    def on_slot(self, lane: str, pool: str, slot: int | None) -> int:
        """How many of ``lane``'s items in flight are on slot ``slot`` of pool ``pool``."""
        return sum(1 for _ticket, sent_pool, sent_slot, _replica in self._sent[lane]
                   if sent_pool == pool and sent_slot == slot and slot is not None)

    def slot_of(self, lane: str, pool: str) -> int | None:
        """The slot of pool ``pool`` that ``lane`` is bound to while it has items of that pool
        in flight (a batch may mix skills, each with its own pool); None: free to pick."""
        for _ticket, sent_pool, slot, _replica in self._sent[lane]:
            if sent_pool == pool and slot is not None:
                return slot
        return None

    def sent(self, lane: str, ticket: str, pool: str) -> None:
        """An item of pool ``pool`` is on its way on ``lane`` (``bound`` says to which replica)."""
        sent = self._sent[lane]
        if not sent:
            metrics.add_in_flight(self._orchestrator, 1)
        sent.append((ticket, pool, None, None))

    def bound(self, lane: str, ticket: str, slot: int, replica: Any) -> None:
        """The item ``ticket`` of ``lane`` went to ``replica``, slot ``slot`` of its pool."""
        self._sent[lane] = [(t, pool, slot, replica) if t == ticket else (t, pool, s, r)
                            for t, pool, s, r in self._sent[lane]]

    def over(self, lane: str, ticket: str) -> None:
        """The send of ``ticket`` is answered, failed or cancelled."""
        sent = self._sent[lane] = [entry for entry in self._sent[lane] if entry[0] != ticket]
        if not sent:
            metrics.add_in_flight(self._orchestrator, -1)

    async def rebalance(self) -> None:
        """For a worker that has no item left: while a lane is idle and another has an item
        waiting behind a running one, withdraw the waiting item (its worker resends it)."""
        idle = sum(1 for sent in self._sent.values() if not sent)
        if idle <= self._stealing:
            return
        waiting = [sent[-1] for sent in self._sent.values() if len(sent) >= 2 and sent[-1][3] is not None]
        self._stealing += 1
        try:
            for ticket, _pool, _slot, replica in waiting:
                try:
                    if await replica.withdraw.remote(ticket):
                        self._withdrawn += 1
                        return
                except ray.exceptions.RayError as exc:  # its replica is gone: so is the item, as its worker learns
                    _log.info("could not withdraw %s: %s", ticket, exc, extra={"component": "handoff"})
        finally:
            self._stealing -= 1
