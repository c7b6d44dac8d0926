"""Lanes: a replica runs the bodies of one lane one after another, in arrival order.

``parallel_handoff`` sends a lane's next item to the lane's replica while the lane's current
item still runs there (see ``actors.handoffs._fanout``). The queued item waits here, holding
no permit, until the body before it has returned and given its permit back; it then takes
that permit warm, without a round trip to the driver or to the semaphore. So a wave of a
fan-out costs a local hand-over instead of a reply and a new request.

A lane never raises the cap: a waiting item holds no permit, and each body still takes its
own (``WarmPermits.take``) before it starts. An item still waiting can be withdrawn by its
ticket (its driver runs it on a lane that went idle); one that has started cannot, so an
item runs at most once.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Lanes"]


class _Lane:
    __slots__ = ("busy", "queue")

    def __init__(self) -> None:
        self.busy = False  # an item of this lane has entered and not left
        self.queue: deque[tuple[str, asyncio.Future[bool]]] = deque()  # waiting items, oldest first


class Lanes:
    """The lanes of one replica, each dropped once it is idle and nobody waits.

    Used from the replica's event loop only (an async actor runs its calls on one loop), so
    ``withdraw``, ``leave`` and a waiting item's wake-up never interleave.
    """

    def __init__(self) -> None:
        self._lanes: dict[str, _Lane] = {}
        self._waiting: dict[str, tuple[str, asyncio.Future[bool]]] = {}  # ticket -> (lane, its turn)

    def __len__(self) -> int:
        return len(self._lanes)

    async def enter(self, lane: str, ticket: str) -> bool:
        """Wait until every earlier item of ``lane`` here has left. True: this item's turn,
        pair it with ``leave``; False: it was withdrawn while it waited and must not run."""
        state = self._lanes.get(lane)
        if state is None:
            state = self._lanes[lane] = _Lane()
        if not state.busy:
            state.busy = True
            return True
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        state.queue.append((ticket, turn))
        self._waiting[ticket] = (lane, turn)
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.result():
                self.leave(lane)  # the turn reached this item as it was cancelled: pass it on
            else:
                self._forget(ticket, state, lane)
            raise
        finally:
            self._waiting.pop(ticket, None)

    def withdraw(self, ticket: str) -> bool:
        """Take back an item that has not started: True if it never will (its ``enter``
        returns False at once), False if it has started, ended, or never arrived here."""
        waiting = self._waiting.pop(ticket, None)
        if waiting is None:
            return False
        lane, turn = waiting
        if turn.done():
            return False  # its turn came; it starts as soon as its coroutine resumes
        self._forget(ticket, self._lanes[lane], lane)
        turn.set_result(False)
        return True

    def withdraw_all(self, lane: str) -> None:
        """Withdraw every item still waiting in ``lane`` (its batch is being cancelled)."""
        state = self._lanes.get(lane)
        if state is None:
            return
        queue, state.queue = state.queue, deque()
        for ticket, turn in queue:
            self._waiting.pop(ticket, None)
            if not turn.done():
                turn.set_result(False)

    def leave(self, lane: str) -> None:
        """The item that entered ``lane`` is over: the next waiting one of the lane starts."""
        state = self._lanes[lane]
        while state.queue:
            _, turn = state.queue.popleft()
            if not turn.done():
                turn.set_result(True)  # the lane stays busy, now with this item
                return
        state.busy = False
        del self._lanes[lane]

    def _forget(self, ticket: str, state: _Lane, lane: str) -> None:
        state.queue = deque(entry for entry in state.queue if entry[0] != ticket)
        if not state.busy and not state.queue:
            self._lanes.pop(lane, None)
