"""The run loop: snapshot -> coordinator -> ``apply_batch`` -> handoffs -> ``tool_result``s.

Each turn one coordinator (a stateless Ray actor that receives only the snapshot and the
message) returns transitions; the orchestrator applies them as a compare-and-set on the
version the coordinator saw. Pending tool calls are vetted by the safety coordinator, run
as parallel handoffs under the run's cap, and their results applied in one batch. The
loop honours ``should_continue=False``, ``handoff_to``, a turn limit and cancellation
(Ctrl-C): in-flight handoffs are cancelled and their calls closed with an error result,
so the committed state stays consistent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import ray
from pydantic import BaseModel, ConfigDict, Field

from actors.agents.coordinator_host import coordinator_config, create_coordinator_actor
from actors.exceptions import VersionConflict
from actors.handoffs.api import Call, parallel_handoff
from actors.orchestrator.facade import Orchestrator
from coordinators import Coordinator, CoordinatorResult, TransitionBatch, thaw

__all__ = ["RunEvent", "RunOutcome", "RunLoop"]

RunStatus = Literal["complete", "stopped", "max_turns", "cancelled"]


def _agent_id(name: str) -> str:
    return f"coordinator:{name}"


class RunEvent(BaseModel):
    """Progress of a run, reported after every step (for live displays)."""

    model_config = ConfigDict(frozen=True)

    turn: int
    coordinator: str
    stage: str
    version: int
    handoffs_in_flight: int
    handoffs_total: int
    findings: int
    reasoning: str | None = None


class RunOutcome(BaseModel):
    """How a run ended and what it left in the state."""

    model_config = ConfigDict(frozen=True)

    status: RunStatus
    reason: str
    turns: int
    version: int
    handoffs: int
    handoff_errors: int
    wall_seconds: float
    state: dict[str, Any] = Field(default_factory=dict)
    """The final ``conversation_state`` (findings, summary, trail, blocked calls)."""
    stage: str = "initial"
    pending_calls: int = 0
    """Tool calls left without a result (0 after every ending, cancellation included)."""


class RunLoop:
    """Drives one orchestrator with a set of coordinators until they say stop.

    ``coordinators`` maps names to pure coordinators; ``first`` runs first; ``safety`` (if
    present among them) vets every pending tool call before it is handed off; ``fallback``
    runs next when a coordinator names no ``handoff_to``.
    """

    def __init__(
        self,
        orch: Orchestrator[Any],
        coordinators: Mapping[str, Coordinator],
        *,
        first: str,
        fallback: str,
        safety: str | None = "safety",
        max_turns: int = 40,
        on_event: Callable[[RunEvent], None] | None = None,
    ) -> None:
        missing = [n for n in (first, fallback) if n not in coordinators]
        if safety is not None and safety not in coordinators:
            missing.append(safety)
        if missing:
            raise ValueError(f"RunLoop: no coordinator named {', '.join(map(repr, missing))}; have {', '.join(sorted(coordinators))}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self._orch = orch
        self._first, self._fallback, self._safety = first, fallback, safety
        self._max_turns = max_turns
        self._on_event = on_event
        self._coordinators = dict(coordinators)
        self._actors = {name: create_coordinator_actor(c) for name, c in coordinators.items()}
        self._handoffs = 0
        self._handoff_errors = 0
        self._in_flight = 0
        self._turn = 0

    async def run(self, message: str) -> RunOutcome:
        """Run to the end; on cancellation, close pending calls and report ``cancelled``."""
        started = time.perf_counter()
        current = self._first
        status: RunStatus = "max_turns"
        reason = f"stopped after the maximum of {self._max_turns} turns"
        await self._record_created()
        try:
            while self._turn < self._max_turns:
                self._turn += 1
                result = await self._step(current, message)
                if not result.should_continue:
                    await self._close_pending(result.reasoning or f"{current} stopped the run")
                    complete = (await self._orch.context()).is_complete
                    status = "complete" if complete else "stopped"
                    reason = result.reasoning or ("done" if complete else f"{current} stopped the run")
                    break
                if result.handoff_to != self._safety:  # pending calls run once safety has seen them
                    if not await self._run_pending_calls(message, vetted=current == self._safety):
                        status, reason = "stopped", "the safety coordinator stopped the run"
                        break
                current = result.handoff_to or self._fallback
        except asyncio.CancelledError:
            # Cancellation is this loop's "stop now": report it as an outcome instead of
            # propagating, so the caller still gets the consistent committed state.
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            await asyncio.shield(self._close_pending("cancelled by the user"))
            status, reason = "cancelled", "cancelled by the user (in-flight handoffs were cancelled)"
        finally:
            for actor in self._actors.values():
                ray.kill(actor)
            for name in self._actors:
                await self._orch._agent_changed(_agent_id(name), "closed")
        ctx = await self._orch.context()
        return RunOutcome(
            status=status,
            reason=reason,
            turns=self._turn,
            version=ctx.version,
            handoffs=self._handoffs,
            handoff_errors=self._handoff_errors,
            wall_seconds=time.perf_counter() - started,
            state=_plain(ctx.conversation_state),
            stage=ctx.conversation_stage,
            pending_calls=len(ctx.pending_tool_calls),
        )

    async def _step(self, name: str, message: str) -> CoordinatorResult:
        """One coordinator turn, applied as a compare-and-set on the version it read."""
        if name not in self._actors:
            raise ValueError(f"a coordinator handed off to {name!r}, which this run does not have ({', '.join(sorted(self._actors))})")
        while True:
            ctx = await self._orch.context()
            await self._orch._agent_changed(_agent_id(name), "running")
            try:
                result: CoordinatorResult = await self._actors[name].process.remote(ctx, message)
            except Exception as exc:  # recorded, then re-raised (cancellation is not an error)
                await self._orch._agent_changed(_agent_id(name), "error", f"{type(exc).__name__}: {exc}")
                raise
            await self._orch._agent_changed(_agent_id(name), "idle")
            try:
                version = await self._orch.apply_batch(result.transitions, expected_version=ctx.version)
            except VersionConflict:
                continue  # someone else wrote in between: decide again on the new snapshot
            await self._emit(name, version, result.reasoning)
            return result

    async def _record_created(self) -> None:
        """Record every coordinator actor as a managed agent of the run (with how to re-create it)."""
        for name, actor in self._actors.items():
            config = coordinator_config(self._coordinators[name])
            await self._orch._agent_created(_agent_id(name), "coordinator", config, actor)

    async def _run_pending_calls(self, message: str, *, vetted: bool) -> bool:
        """Hand off every pending call (after safety, unless it just ran); False if safety stopped the run."""
        ctx = await self._orch.context()
        if not ctx.pending_tool_calls:
            return True
        if self._safety is not None and not vetted:
            verdict = await self._step(self._safety, message)
            if not verdict.should_continue:
                await self._close_pending(verdict.reasoning or "stopped by the safety coordinator")
                return False
            ctx = await self._orch.context()
        pending = list(ctx.pending_tool_calls.values())
        if not pending:
            return True
        calls = [Call(p.tool_name, _plain(p.arguments)) for p in pending]
        self._in_flight = len(calls)
        await self._emit("handoffs", ctx.version, f"{len(calls)} tool call(s) in flight")
        try:
            results = await parallel_handoff(self._orch, calls, dict)
        finally:
            self._in_flight = 0
        batch = TransitionBatch()
        for p, r in zip(pending, results):
            self._handoffs += 1
            if r.ok:
                batch.tool_result(p.call_id, r.output)
            else:
                self._handoff_errors += 1
                batch.tool_result(p.call_id, {"error": f"{type(r.error).__name__}: {r.error}"}, is_error=True)
        version = await self._orch.apply_batch(batch)
        await self._emit("handoffs", version, None)
        return True

    async def _close_pending(self, why: str) -> None:
        """Answer every pending call with an error, so no call is left dangling."""
        ctx = await self._orch.context()
        if not ctx.pending_tool_calls:
            return
        batch = TransitionBatch()
        for call_id in ctx.pending_tool_calls:
            batch.tool_result(call_id, {"error": why}, is_error=True)
        await self._orch.apply_batch(batch)

    async def _emit(self, coordinator: str, version: int, reasoning: str | None) -> None:
        if self._on_event is None:
            return
        ctx = await self._orch.context()
        self._on_event(
            RunEvent(
                turn=self._turn,
                coordinator=coordinator,
                stage=ctx.conversation_stage,
                version=version,
                handoffs_in_flight=self._in_flight,
                handoffs_total=self._handoffs,
                findings=len(ctx.get_state("findings", ()) or ()),
                reasoning=reasoning,
            )
        )


def _plain(value: Any) -> Any:
    return thaw(value)
