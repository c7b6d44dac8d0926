"""What a handle reads of its run's past: committed changes as they come, the journal's
history, the state at a kept version, and forks from one.

``HistoryReads`` is mixed into ``Orchestrator`` (the facade builds handles and sends their
commands; this is the part that reads back what was committed). Every read is one command of
``_commands`` sent through the handle's ``_call``; none writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any, Generic, Self, TypeVar, cast

from pydantic import BaseModel

from actors.callers.protocol import ToolCaller
from actors.exceptions import OrchestratorClosed
from actors.orchestrator._commands import Changes, Command, History, StateAt
from actors.orchestrator.changes import Change
from actors.orchestrator.spec import OrchestratorStatistics, RunDescription
from cluster.storage import Store

__all__ = ["HistoryReads"]

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R")

_POLL_SECONDS = 10.0  # how long one subscription call waits for a change before asking again


class HistoryReads(Generic[S]):
    """The reads of a run's past, on a handle that has ``_call``, ``statistics`` and ``describe``
    (``Orchestrator``)."""

    _name: str
    _caller: ToolCaller | None
    _max_parallel: int

    async def _call(self, command: Command[R]) -> R:
        raise NotImplementedError  # Orchestrator._call

    async def statistics(self) -> OrchestratorStatistics:
        raise NotImplementedError  # Orchestrator.statistics

    async def describe(self) -> RunDescription:
        raise NotImplementedError  # Orchestrator.describe

    async def subscribe(self, since: int = 0) -> AsyncGenerator[Change, None]:
        """Committed changes after version ``since``, in order, following the run live."""
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise ValueError(f"subscribe(since=...) takes a version >= 0, got {since!r}")
        cursor: int | None = None
        last_version = since
        while True:
            try:
                batch: list[Change] = await self._call(Changes(cursor, last_version, _POLL_SECONDS))
            except OrchestratorClosed:
                return
            for change in batch:
                cursor = change.seq
                last_version = max(last_version, change.version)
                yield change

    async def history(self, since: int = 0, until: int | None = None) -> list[Change]:
        """Committed changes with ``since < version <= until`` (None: up to the last one), from
        the journal, in order. ``HistoryCompacted`` names the earliest version still kept when
        retention removed older ones (a run without a store: what its memory still holds)."""
        _check_version("since", since)
        if until is not None:
            _check_version("until", until)
        return await self._call(History(since, until))

    async def state_at(self, version: int) -> S:
        """The state exactly as it was committed at ``version`` (``HistoryCompacted`` if too old)."""
        _check_version("version", version)
        return cast(S, await self._call(StateAt(version)))  # the run's state type

    async def fork(self, new_name: str, *, at_version: int, store: str | Store | None = None) -> Self:
        """A new run named ``new_name`` whose state is exactly this run's state at ``at_version``.

        The new run starts at version 0 with that state, the same caller, cap and retention;
        it lives in ``store`` (default: this run's store file; None for a run without one).
        This run and its journal are untouched, and later writes to either run never reach
        the other. Its store entry records ``forked_from`` and ``forked_at``.
        """
        if not isinstance(new_name, str) or not new_name.strip():
            raise ValueError(f"fork() needs a non-empty new_name, got {new_name!r}")
        if new_name == self._name:
            raise ValueError(f"fork() needs a name other than the run's own ({new_name!r})")
        _check_version("at_version", at_version)
        state = await self.state_at(at_version)
        stats = await self.statistics()
        if store is None:
            store = stats.store
        info = await self.describe()
        build = cast(Callable[..., Self], type(self))  # the handle's own class: Orchestrator
        return await asyncio.to_thread(
            build, state, caller=self._caller, name=new_name, store=store, durability=stats.durability,
            max_parallel=self._max_parallel, checkpoint_every=info.checkpoint_every,
            keep_versions=info.keep_versions, keep_days=info.keep_days,
            _metadata={"forked_from": self._name, "forked_at": at_version},
        )


def _check_version(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a version (an int >= 0), got {value!r}")
