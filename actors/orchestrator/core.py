"""One run's single writer as an ordinary object: in this process, without Ray.

``RunCore`` drives the very writer that an ``Orchestrator``'s actor or run host drives
(``OrchestratorActor``: reads, the write pipeline, journalling, activation and fencing,
retention), but calls it directly instead of through Ray. It is the run's writer for tests
of coordinators, states and stores, and for tests of activation ordering and fencing, which
run here in milliseconds: two ``RunCore`` objects on one store file behave as two hosts of
one cluster taking a run from each other.

It has no handoffs of its own (a caller's skills run where the caller runs them) and no
subscribers; everything it commits is journalled exactly as a hosted run's would be, so an
``Orchestrator.attach`` of the same name and store takes the run up where it stopped.
"""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from actors.callers.protocol import ToolCaller
from actors.orchestrator._activation import Stage
from actors.orchestrator._actor import Hosting, OrchestratorActor
from actors.orchestrator._arguments import checked_transitions, request_id_of
from actors.orchestrator._recovery import stored_run_spec
from actors.orchestrator.changes import Change
from actors.orchestrator.spec import DEFAULT_KEEP_VERSIONS, OrchestratorStatistics, RunSpec
from cluster.storage import Store, WriterFenced, check_durability
from coordinators import ContextSnapshot, StateTransition, TransitionBatch

__all__ = ["RunCore"]

S = TypeVar("S", bound=BaseModel)

_log = logging.LoggerAdapter(logging.getLogger("soloist.orchestrator"), {"component": "run-core"})


class RunCore(Generic[S]):
    """One run's writer in this process (no Ray): ``apply``, ``apply_batch``, reads, history.

    ``RunCore(initial, store=...)`` starts a new run (``name`` defaults to a fresh one);
    ``RunCore.resume(name, store=...)`` takes a stored run up again, as its newest activation:
    any other writer of the run (another ``RunCore``, a run host) is fenced from then on.
    Use it as an async context manager, or call ``close()``: closing checkpoints the run and
    lets its store go (a store given as an object stays open: it is the caller's).
    """

    def __init__(
        self,
        initial: S,
        *,
        name: str | None = None,
        store: str | os.PathLike[str] | Store | None = None,
        durability: str = "sync",
        caller: ToolCaller | None = None,
        checkpoint_every: int = 1_000,
        keep_versions: int | None = DEFAULT_KEEP_VERSIONS,
        keep_days: float | None = None,
    ) -> None:
        if not isinstance(initial, BaseModel):
            raise TypeError(f"RunCore needs a pydantic model as its initial state, got {type(initial).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"name must be a non-empty string or None, got {name!r}")
        run_name = name or f"run-{uuid.uuid4().hex[:12]}"
        spec = RunSpec(
            name=run_name, named=True, token=secrets.token_urlsafe(32), initial=initial,
            store=os.fspath(store) if isinstance(store, os.PathLike) else store,
            durability=check_durability(durability), caller=caller, semaphore_scope=f"core-{secrets.token_hex(8)}",
            checkpoint_every=checkpoint_every, keep_versions=keep_versions, keep_days=keep_days,
        )
        self._start(spec, creating=True)

    @classmethod
    def resume(cls, name: str, *, store: str | os.PathLike[str] | Store, durability: str | None = None) -> "RunCore[Any]":
        """Take the stored run ``name`` up again, with the durability it was created with
        (unless ``durability`` says otherwise). ``LookupError`` when the store has no such run."""
        location = os.fspath(store) if isinstance(store, os.PathLike) else store
        spec = stored_run_spec(location, name, None if durability is None else check_durability(durability), reopen=True)
        core: RunCore[Any] = cls.__new__(cls)
        core._start(spec, creating=False)
        return core

    def _start(self, spec: RunSpec, *, creating: bool) -> None:
        self._token = spec.token
        self._owns_store = not isinstance(spec.store, Store)
        store = spec.open_store()
        self._store = store
        self._fn_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-core-apply")
        self._io_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-core-io")
        hosting = Hosting(store=store, fn_executor=self._fn_executor, io_executor=self._io_executor,
                          holder={"host": "in-process", "pid": os.getpid()}, creating=creating)
        try:
            self._writer = OrchestratorActor(spec, hosting)
        except BaseException:
            self._release()
            raise
        self._closed = False

    @property
    def name(self) -> str:
        return self._writer._name

    @property
    def stage(self) -> Stage | None:
        """Where this activation of the run is: ``claimed``, ``fenced``, ``replayed``,
        ``serving``, ``unloading`` or ``closed`` (a new ``RunCore`` is ``serving``)."""
        return self._writer.stage

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages this activation went through, in order: a stored run is fenced before it
        is replayed; a new one is created (replayed) in the commit of its epoch."""
        return self._writer.stages

    # ------------------------------------------------------------------ reads

    async def version(self) -> int:
        return await self._writer.version()

    async def snapshot(self) -> S:
        """A deep copy of the last committed state (its own: mutating it changes nothing)."""
        _, state = await self._writer.snapshot()
        return state.model_copy(deep=True)  # type: ignore[return-value]  # the run's state type is S

    async def context(self) -> ContextSnapshot:
        return await self._writer.context()

    async def history(self, since: int = 0, until: int | None = None) -> list[Change]:
        return await self._writer.history(since, until)

    async def statistics(self) -> OrchestratorStatistics:
        return await self._writer.statistics()

    # ----------------------------------------------------------------- writes

    async def apply(self, fn: Callable[[S], Any], *, request_id: str | None = None) -> int:
        """Run ``fn`` on a copy of the state; commit the validated result; return the version."""
        if fn is None or not callable(fn):
            raise TypeError("apply() takes a function that mutates the state it is given (or returns a new one)")
        return await self._writer.apply_fn(self._token, request_id_of(request_id), fn)

    async def apply_batch(
        self, batch: TransitionBatch | Iterable[StateTransition], *, expected_version: int | None = None,
        request_id: str | None = None,
    ) -> int:
        """Apply transitions through ``reduce``, all or nothing (``VersionConflict`` when
        ``expected_version`` is stale); return the new version."""
        transitions = checked_transitions(batch, expected_version)
        return await self._writer.apply_batch(self._token, request_id_of(request_id), transitions, expected_version)

    async def close(self) -> None:
        """Checkpoint the run and let its store go. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._writer.close(self._token)
        except WriterFenced as exc:
            # A newer activation took the run over: it is that writer's now, and this one stops
            # without writing (its close was refused, as every write of it is), as a host stops
            # a superseded activation.
            _log.warning("closed without a final checkpoint: %s", exc)
            await self._writer.abandon()
        finally:
            self._release()

    def _release(self) -> None:
        self._fn_executor.shutdown(wait=False)
        self._io_executor.shutdown(wait=False)
        if self._owns_store and self._store is not None:
            self._store.close()

    async def __aenter__(self) -> "RunCore[S]":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

