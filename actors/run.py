"""``Run``: drive an orchestrator with your own coordinators, turn by turn, resumably.

Each turn one coordinator (hosted in a stateless Ray actor, given only the snapshot and the
message) returns a ``CoordinatorResult``; its transitions are committed as a compare-and-set
on the version it saw, together with the run record (``actors.interrupts.RunRecord``) that
says where the run now is. Pending tool calls are vetted by the vetting coordinator (if
any) and handed off in parallel under the run's cap; each call's result is committed the
moment it returns, again with the record (whose counters it moves). So the record in the
committed state is always exactly "what is done and what is next": a resumed run (after a
wait for approval, a dead driver or a restarted orchestrator actor) never repeats a
committed turn or a call whose result was committed; only calls still in flight when the
driver died run again.

Routing: ``should_continue=False`` ends the run; ``handoff_to`` names the next coordinator
(else the fallback); a result below ``confidence_threshold`` is set aside for the fallback,
or held for approval (``low_confidence="approval"``). A coordinator asks for approval with
``ask_approval``: the run stops in ``waiting`` with the interrupts open in its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import ray

from actors.approvals import answer_interrupt, open_interrupts
from actors.exceptions import RunConfigError, RunStepError, VersionConflict
from actors.handoffs.api import Call, Result, parallel_handoff
from actors.interrupts import (
    RUN_CONFIG_KEY,
    RUN_RECORD_KEY,
    ApprovalRequest,
    Interrupt,
    RunPhase,
    RunRecord,
    TurnNote,
    approval_requests,
    is_final,
    read_record,
    record_transition,
)
from actors.orchestrator.facade import Orchestrator
from actors.run_config import LowConfidence, RunConfig
from actors.run_events import OutcomeStatus, RunEvent, RunEventKind, RunOutcome
from actors.agents.coordinator_host import coordinator_config, create_coordinator_host
from cluster.storage import FinalStatus
from coordinators import (ContextSnapshot, Coordinator, CoordinatorResult, StateTransition, TransitionBatch, TransitionType,
                          thaw)

__all__ = ["Run"]

_log = logging.getLogger("soloist.run")

_DONE = object()


def _agent_id(name: str) -> str:
    return f"coordinator:{name}"


class Run:
    """A multi-agent run over one orchestrator (whose state is an ``AgentState``).

    - ``orchestrator``: the owner's handle of the run's orchestrator.
    - ``coordinators``: your coordinators, a list (keyed by ``name``) or a name -> coordinator map.
    - ``first``: who takes the first turn; ``fallback``: who goes next when a result names
      no ``handoff_to`` and who replaces a low-confidence result (default: ``first``).
    - ``vetting``: optional coordinator that sees every batch of pending tool calls before
      they are handed off (it may answer calls with errors, ask approval, or stop the run).
    - ``max_turns``: coordinator turns (vetting turns included) before the run stops.
    - ``confidence_threshold``: results (of coordinators other than the fallback and the
      vetting coordinator) with a lower ``confidence`` are not applied; with
      ``low_confidence="fallback"`` the fallback takes the turn, with ``"approval"`` the
      turn is held for a person (an interrupt of kind ``turn``).
    - ``on_event``: called with every ``RunEvent`` (or iterate ``stream()``).

    The settings are checked once into a frozen ``RunConfig`` (``RunConfigError`` names
    every problem), stored in the run's state when it starts, for ``restore``.
    """

    def __init__(
        self,
        orchestrator: Orchestrator[Any],
        coordinators: Mapping[str, Coordinator] | Sequence[Coordinator],
        *,
        first: str,
        fallback: str | None = None,
        vetting: str | None = None,
        max_turns: int = 40,
        confidence_threshold: float = 0.0,
        low_confidence: LowConfidence = "fallback",
        on_event: Callable[[RunEvent], None] | None = None,
    ) -> None:
        config = RunConfig.checked(coordinators, first=first, fallback=fallback, vetting=vetting, max_turns=max_turns,
                                   confidence_threshold=confidence_threshold, low_confidence=low_confidence)
        self._setup(orchestrator, config, on_event)

    def _setup(self, orchestrator: Orchestrator[Any], config: RunConfig,
               on_event: Callable[[RunEvent], None] | None) -> None:
        if not isinstance(orchestrator, Orchestrator):
            raise RunConfigError(f"Run(orchestrator=...) takes an actors.Orchestrator, got {type(orchestrator).__name__}")
        self._orch = orchestrator
        self._config = config
        self._on_event = on_event
        self._actors: dict[str, Any] = {}  # coordinator name -> the actor hosting it (one for all), this drive only
        self._in_flight = 0  # calls of the current handoff batch not yet returned
        self.outcome: RunOutcome | None = None
        """The outcome of the last ``run``/``resume``/``stream`` (None before)."""

    # ------------------------------------------------------------------ public

    @classmethod
    def of_config(cls, orchestrator: Orchestrator[Any], config: RunConfig, *,
                  on_event: Callable[[RunEvent], None] | None = None) -> Run:
        """The ``Run`` of an already checked ``RunConfig``."""
        run = cls.__new__(cls)
        run._setup(orchestrator, config, on_event)
        return run

    @classmethod
    async def restore(cls, orchestrator: Orchestrator[Any], *, on_event: Callable[[RunEvent], None] | None = None,
                      max_turns: int | None = None) -> Run:
        """The ``Run`` that started in ``orchestrator``'s state, rebuilt from what it stored
        when it started (its coordinators, pickled, and its settings), e.g. to ``resume()``
        it from another process. ``max_turns`` raises (or lowers) the stored limit."""
        ctx = await orchestrator.context()
        raw = ctx.get_state(RUN_CONFIG_KEY)
        if raw is None:
            raise RunConfigError(f"run {orchestrator.name!r} holds no stored run configuration; it was not started by Run.run()")
        config = RunConfig.from_stored(raw, orchestrator.name)
        if max_turns:
            config = RunConfig.checked(config.coordinators, first=config.first, fallback=config.fallback,
                                       vetting=config.vetting, max_turns=max_turns,
                                       confidence_threshold=config.confidence_threshold,
                                       low_confidence=config.low_confidence)
        return cls.of_config(orchestrator, config, on_event=on_event)

    @property
    def orchestrator(self) -> Orchestrator[Any]:
        return self._orch

    @property
    def config(self) -> RunConfig:
        """The run's coordinators and settings (frozen)."""
        return self._config

    async def run(self, message: str) -> RunOutcome:
        """Start the run with ``message`` (given to every coordinator) and drive it until it
        ends or waits for approval. A run already started in this state: ``RunConfigError``."""
        if not isinstance(message, str):
            raise RunConfigError(f"run(message) takes a string, got {type(message).__name__}")
        return await self._drive(message)

    async def resume(self) -> RunOutcome:
        """Continue the run from its committed record: after answering interrupts, or after
        the driver or the orchestrator died. Nothing committed is run again."""
        return await self._drive(None)

    async def resume_when_answered(self, *, timeout: float | None = None) -> RunOutcome:
        """Wait until no interrupt of the run is open any more (answered from anywhere:
        ``answer``, ``soloist approve``, the runs page), then ``resume()``.

        It follows the run's committed changes (``subscribe``), so it wakes on the answer's
        commit, not on a poll. ``TimeoutError`` if interrupts are still open after ``timeout``
        seconds (nothing is resumed then).
        """
        await asyncio.wait_for(self._answered(), timeout)
        return await self.resume()

    async def _answered(self) -> None:
        version = await self._orch.version()
        if not await open_interrupts(self._orch):
            return
        async with contextlib.aclosing(self._orch.subscribe(since=version)) as changes:
            async for _change in changes:
                if not await open_interrupts(self._orch):
                    return

    async def stream(self, message: str | None = None) -> AsyncIterator[RunEvent]:
        """Run (``message``) or resume (None), yielding each ``RunEvent`` as it happens; the
        outcome is then in ``self.outcome``. Closing the iterator cancels the run."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        previous = self._on_event

        def push(event: RunEvent) -> None:
            if previous is not None:
                previous(event)
            queue.put_nowait(event)

        self._on_event = push
        task = asyncio.ensure_future(self._drive(message))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                yield item
            task.result()  # re-raise a failure of the run
        finally:
            self._on_event = previous
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def interrupts(self) -> list[Interrupt]:
        """The open interrupts of this run (``actors.open_interrupts``)."""
        return await open_interrupts(self._orch)

    async def answer(self, interrupt_id: str, *, approve: bool, reason: str | None = None) -> int:
        """Answer one open interrupt (``actors.answer_interrupt``); then ``resume()``."""
        return await answer_interrupt(self._orch, interrupt_id, approve=approve, reason=reason)

    # ---------------------------------------------------------------- driving

    async def _drive(self, message: str | None) -> RunOutcome:
        started = time.perf_counter()
        ctx = await self._orch.context()
        record = read_record(ctx)
        if message is not None:
            if record is not None:
                raise RunConfigError(
                    f"run {self._orch.name!r} was already started (status {record.status}); use resume() to continue it"
                )
            record = RunRecord(message=message, next=self._config.first)
            config = StateTransition(TransitionType.UPDATE_STATE, {"key": RUN_CONFIG_KEY, "value": self._config.stored()})
            await self._orch.apply_batch([config, record_transition(record)], expected_version=ctx.version)
            await self._orch.mark_run("running")
        elif record is None:
            raise RunConfigError(f"run {self._orch.name!r} has no run to resume: its state holds no run record; use run(message)")
        elif is_final(record.status):
            return await self._outcome(record, started, status=record.status)
        elif record.open_interrupts():
            return await self._outcome(record, started, status="waiting",
                                       reason=f"waiting for {len(record.open_interrupts())} approval(s)")
        else:
            await self._emit("resumed", record, ctx.version, coordinator=record.next or "-")
        status: OutcomeStatus = "max_turns"
        reason = f"stopped after the maximum of {self._config.max_turns} turns"
        ended = False  # True once the run reached a final status (its coordinators are then closed for good)
        try:
            self._start_actors()
            await self._record_created()
            status, reason = await self._loop(reason)
            ended = status != "waiting"
        except asyncio.CancelledError:
            # Cancellation is this run's "stop now": close pending calls and report it.
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            ctx = await asyncio.shield(self._orch.context())
            status, reason = await asyncio.shield(self._finish(
                ctx, _record(ctx), "cancelled by the user (in-flight handoffs were cancelled)", status="cancelled"))
            ended = True
        finally:
            await self._stop_actors(final=ended)
        final = _record(await self._orch.context())
        if status == "waiting":
            await self._orch.mark_run("waiting")
        return await self._outcome(final, started, status=status, reason=reason)

    async def _loop(self, reason: str) -> tuple[OutcomeStatus, str]:
        """Take steps until the run ends or waits: each step reads the committed record and
        does what it says is next."""
        while True:
            ctx = await self._orch.context()
            record = _record(ctx)
            if record.open_interrupts():
                return "waiting", f"waiting for {len(record.open_interrupts())} approval(s)"
            if not record.next:  # a held final turn was approved
                return await self._finish(ctx, record, record.reason or "done")
            if record.phase == "vet":
                await self._vet(ctx, record)
            elif record.phase == "calls":
                await self._run_calls(ctx, record)
            elif record.turn >= self._config.max_turns:
                return await self._finish(ctx, record, reason, status="max_turns")
            else:
                await self._turn(ctx, record, record.next)
            end = _record(await self._orch.context())
            if is_final(end.status):
                return end.status, end.reason or end.status

    # ------------------------------------------------------------------ steps

    async def _turn(self, ctx: ContextSnapshot, record: RunRecord, name: str) -> None:
        """One coordinator turn, committed with the record as a compare-and-set."""
        config = self._config
        result = await self._process(name, ctx, record)
        if name != config.fallback and result.confidence < config.confidence_threshold:
            if config.low_confidence == "fallback":
                updated = _taken(record, ctx, name, result, "fallback", next=config.fallback, phase="turn")
                await self._step(ctx, updated, (), kind="low_confidence", by=name, result=result)
                return
            await self._hold_turn(ctx, record, name, result, question={
                "reason": "low confidence", "coordinator": name, "confidence": result.confidence,
                "threshold": config.confidence_threshold, "reasoning": result.reasoning})
            return
        requests = approval_requests(result, name)
        if any(r.whole_turn for r in requests):
            questions = [r.question for r in requests if r.whole_turn]
            await self._hold_turn(ctx, record, name, result, question=questions[0] if len(questions) == 1 else questions)
            return
        next_name, phase = self._route(name, result, ctx, record)
        await self._apply_turn(ctx, record, name, result, requests, next_name=next_name, phase=phase,
                               stop_reason=f"{name} stopped the run")

    async def _vet(self, ctx: ContextSnapshot, record: RunRecord) -> None:
        """Let the vetting coordinator see the pending calls (if any) before they run."""
        held = record.held_call_ids()
        vetting = self._config.vetting
        if not any(c not in held for c in ctx.pending_tool_calls) or vetting is None:
            await self._run_calls(ctx, record.model_copy(update={"phase": "calls"}))
            return
        result = await self._process(vetting, ctx, record)
        requests = approval_requests(result, vetting)
        await self._apply_turn(ctx, record, vetting, result, requests, next_name=record.next, phase="calls",
                               stop_reason="stopped by the vetting coordinator")

    async def _apply_turn(self, ctx: ContextSnapshot, record: RunRecord, name: str, result: CoordinatorResult,
                          requests: list[ApprovalRequest], *, next_name: str, phase: RunPhase, stop_reason: str) -> None:
        """Commit ``name``'s result as taken: its transitions, the interrupts its approval
        requests open, and where the run goes next (nowhere, if it stopped the run)."""
        updated = _taken(record, ctx, name, result, "applied", next=next_name, phase=phase)
        own_calls = [t.data["call_id"] for t in result.transitions if t.transition_type == TransitionType.EXECUTE_TOOL]
        updated, opened = self._open_call_interrupts(updated, name, result, requests, own_calls, ctx)
        stop = None
        if not result.should_continue:
            stop = result.reasoning or stop_reason
            updated = updated.model_copy(update={"next": "", "reason": stop})
        await self._step(ctx, updated, result.transitions, kind="turn", by=name, result=result, opened=opened, stop=stop)

    async def _hold_turn(self, ctx: ContextSnapshot, record: RunRecord, name: str, result: CoordinatorResult,
                         question: Any) -> None:
        """Open a ``turn`` interrupt: the result's transitions wait for a person's approval."""
        next_name, phase = self._route(name, result, ctx, record)
        interrupt_id = f"{self._orch.name}/i{record.opened + 1}"
        held = {
            "transitions": [t.model_dump(mode="json") for t in result.transitions],
            "next": next_name, "phase": phase, "stop": not result.should_continue,
            "reasoning": result.reasoning, "on_reject": self._config.fallback,
        }
        interrupt = Interrupt(id=interrupt_id, kind="turn", question=thaw(question), coordinator=name, turn=record.turn + 1,
                              opened_version=ctx.version + 1, confidence=result.confidence, held=held)
        updated = _taken(record, ctx, name, result, "held", status="waiting", opened=record.opened + 1,
                         interrupts={**record.interrupts, interrupt_id: interrupt})
        await self._step(ctx, updated, (), kind="interrupt", by=name, result=result, opened=(interrupt_id,))

    async def _step(self, ctx: ContextSnapshot, updated: RunRecord, transitions: Iterable[StateTransition], *,
                    kind: RunEventKind, by: str, result: CoordinatorResult, opened: tuple[str, ...] = (),
                    stop: str | None = None) -> None:
        """The one way a decided step is taken: commit its transitions with the record that
        says where the run now is (a compare-and-set on ``ctx``'s version), report it, and
        end the run if the step stopped it (``stop``, unless it opened interrupts)."""
        version = await self._commit(transitions, updated, ctx.version)
        if version is None:
            return  # someone else wrote in between: decide again on the new snapshot
        own = opened if kind == "interrupt" else ()
        await self._emit(kind, updated, version, coordinator=by, result=result, interrupts=own)
        if opened and not own:
            await self._emit("interrupt", updated, version, coordinator=by, interrupts=opened)
        if stop is not None and not opened:
            await self._finish(await self._orch.context(), updated, stop, by=by)

    async def _run_calls(self, ctx: ContextSnapshot, record: RunRecord) -> None:
        """Hand off every pending call not held for approval; commit each result as it returns."""
        held = record.held_call_ids()
        pending = [p for cid, p in ctx.pending_tool_calls.items() if cid not in held]
        if not pending:
            await self._commit((), record.model_copy(update={"phase": "turn"}), ctx.version)
            return
        calls = [Call(p.tool_name, thaw(p.arguments)) for p in pending]
        self._in_flight = len(calls)
        await self._emit("handoffs", record, ctx.version, coordinator="handoffs", calls=tuple(c.skill for c in calls))

        async def commit(result: Result[dict[str, Any]]) -> None:
            await self._commit_result(pending[result.index].call_id, result)
            self._in_flight -= 1

        try:
            await parallel_handoff(self._orch, calls, dict, on_result=commit)
        finally:
            self._in_flight = 0
        while True:  # every result is in: the next turn is due (the last result's commit said so)
            ctx = await self._orch.context()
            done = _record(ctx)
            if done.phase == "turn":
                version = ctx.version
                break
            committed = await self._commit((), done.model_copy(update={"phase": "turn"}), ctx.version)
            if committed is not None:
                version = committed
                done = done.model_copy(update={"phase": "turn"})
                break
        await self._emit("handoffs", done, version, coordinator="handoffs")

    async def _commit_result(self, call_id: str, result: Result[dict[str, Any]]) -> None:
        """Commit one handed-off call's result with the record's counters, the moment it
        returns: once committed, no resume runs the call again. The last result of the batch
        also moves the run to its next turn (in the same version). A conflict (another
        result, an answer) re-reads the record and commits again on top of it."""
        batch = TransitionBatch()
        if result.error is None:
            batch.tool_result(call_id, result.output)
        else:
            batch.tool_result(call_id, {"error": f"{type(result.error).__name__}: {result.error}"}, is_error=True)
        while True:
            ctx = await self._orch.context()
            if call_id not in ctx.pending_tool_calls:
                _log.warning("the result of tool call %s was not committed: the call was closed meanwhile", call_id,
                             extra={"component": "run", "orchestrator": self._orch.name})
                return
            record = _record(ctx)
            others = set(ctx.pending_tool_calls) - {call_id} - record.held_call_ids()
            counted = record.model_copy(update={"handoffs": record.handoffs + 1,
                                                "handoff_errors": record.handoff_errors + int(result.error is not None),
                                                "phase": record.phase if others else "turn"})
            if await self._commit(batch, counted, ctx.version) is not None:
                return

    async def _finish(self, ctx: ContextSnapshot, record: RunRecord, reason: str, status: FinalStatus | None = None,
                      by: str | None = None) -> tuple[FinalStatus, str]:
        """End the run: close every pending call with an error and record the final status.

        A write that came in between (the result of a call still in flight when the run was
        cancelled, an answer) makes the commit a conflict: the batch is then built again from
        what that write left (the calls still pending, the record's counters as they now are),
        never sent again as it was."""
        final_status: FinalStatus = status or ("complete" if ctx.is_complete else "stopped")
        while True:
            batch = TransitionBatch()
            for call_id in ctx.pending_tool_calls:
                batch.tool_result(call_id, {"error": reason}, is_error=True)
            final = record.model_copy(update={"status": final_status, "reason": reason, "next": ""})
            version = await self._commit(batch, final, ctx.version)
            if version is not None:
                break
            ctx = await self._orch.context()
            record = _record(ctx)
            if is_final(record.status):  # ended by another writer meanwhile: that end stands
                return record.status, record.reason or record.status
        await self._orch.mark_run(final_status, finished=True)
        await self._emit("finished", final, version or ctx.version, coordinator=by or record.next or "-", status=final_status)
        return final_status, reason

    def _route(self, name: str, result: CoordinatorResult, ctx: ContextSnapshot, record: RunRecord) -> tuple[str, RunPhase]:
        """(next coordinator, phase) after ``name``'s committed turn."""
        target = result.handoff_to
        if not _calls_after(ctx, record, result):
            if target is not None and target not in self._config.coordinators:
                raise RunStepError(
                    f"coordinator {name!r} handed off to {target!r}, which this run does not have "
                    f"({', '.join(sorted(self._config.coordinators))})"
                )
            return target or self._config.fallback, "turn"
        if target is not None and target not in self._config.coordinators:
            raise RunStepError(
                f"coordinator {name!r} handed off to {target!r}, which this run does not have ({', '.join(sorted(self._config.coordinators))})"
            )
        if name == self._config.vetting:
            return target or self._config.fallback, "calls"
        if target is not None and target == self._config.vetting:
            return target, "turn"
        return target or self._config.fallback, "vet" if self._config.vetting else "calls"

    def _open_call_interrupts(self, record: RunRecord, name: str, result: CoordinatorResult, requests: list[Any],
                              own_calls: list[str], ctx: ContextSnapshot) -> tuple[RunRecord, tuple[str, ...]]:
        """Record a ``tool_calls`` interrupt per approval request of the result."""
        if not requests:
            return record, ()
        pending = [c for c in ctx.pending_tool_calls if c not in record.held_call_ids()]
        interrupts = dict(record.interrupts)
        opened: list[str] = []
        count = record.opened
        for request in requests:
            call_ids = request.call_ids
            if call_ids is None:
                call_ids = tuple(own_calls) or (tuple(pending) if name == self._config.vetting else ())
            unknown = sorted(set(call_ids) - set(own_calls) - set(pending))
            if unknown or not call_ids:
                raise RunStepError(f"coordinator {name!r} asked approval for unknown tool call(s) {unknown or '(none)'}")
            count += 1
            interrupt_id = f"{self._orch.name}/i{count}"
            interrupts[interrupt_id] = Interrupt(
                id=interrupt_id, kind="tool_calls", question=thaw(request.question), call_ids=tuple(call_ids),
                coordinator=name, turn=record.turn, opened_version=ctx.version + 1, confidence=result.confidence)
            opened.append(interrupt_id)
        return record.model_copy(update={"interrupts": interrupts, "opened": count, "status": "waiting"}), tuple(opened)

    # ---------------------------------------------------------------- helpers

    async def _process(self, name: str, ctx: ContextSnapshot, record: RunRecord) -> CoordinatorResult:
        await self._orch.agent_changed(_agent_id(name), "running")
        try:
            result = await self._actors[name].process.remote(ctx, record.message, name)
        except Exception as exc:  # recorded, then re-raised (cancellation is not an error)
            await self._orch.agent_changed(_agent_id(name), "error", f"{type(exc).__name__}: {exc}")
            raise
        await self._orch.agent_changed(_agent_id(name), "idle")
        if not isinstance(result, CoordinatorResult):
            raise RunStepError(f"coordinator {name!r} returned a {type(result).__name__}, not a CoordinatorResult")
        return result

    async def _commit(self, transitions: Iterable[StateTransition], record: RunRecord, expected: int) -> int | None:
        """Commit ``transitions`` plus the record at ``expected``; None on a version conflict
        (the caller decides again on the new snapshot)."""
        batch = TransitionBatch()
        batch.extend(transitions)
        if record.status == "running" or record.status == "waiting" and not record.open_interrupts():
            record = record.model_copy(update={"status": "running"})
        batch.add(record_transition(record))
        try:
            return await self._orch.apply_batch(batch, expected_version=expected)
        except VersionConflict:
            return None

    def _start_actors(self) -> None:
        """One actor hosts all the run's coordinators: their turns come one at a time."""
        host = create_coordinator_host(self._config.coordinators)
        self._actors = {name: host for name in self._config.coordinators}

    async def _stop_actors(self, *, final: bool) -> None:
        """Kill this drive's coordinator actors; their records end ``closed`` when the run is
        over, ``idle`` when it waits (a resumed drive re-creates them). A record in ``error``
        (its coordinator failed) keeps its error while the run waits: ``error`` may only go
        to ``closed`` or be created again, and moving it to ``idle`` raised over the error
        that stopped the drive."""
        actors, self._actors = self._actors, {}
        for actor in {id(a): a for a in actors.values()}.values():
            ray.kill(actor)
        if not actors:
            return
        failed = set() if final else {a["agent_id"] for a in await self._orch.agents() if a.get("lifecycle") == "error"}
        for name in actors:
            if _agent_id(name) not in failed:
                await self._orch.agent_changed(_agent_id(name), "closed" if final else "idle")

    async def _record_created(self) -> None:
        """Record every coordinator actor as a managed agent of the run (with how to re-create it)."""
        for name, actor in self._actors.items():
            config = coordinator_config(self._config.coordinators[name])
            await self._orch.agent_created(_agent_id(name), "coordinator", config, actor)

    async def _emit(self, kind: RunEventKind, record: RunRecord, version: int, *, coordinator: str,
                    result: CoordinatorResult | None = None, calls: tuple[str, ...] = (), interrupts: tuple[str, ...] = (),
                    status: FinalStatus | None = None) -> None:
        if result is not None:  # every coordinator decision is logged with its reasoning and confidence
            _log.info("%s turn %d by %s at version %d (confidence %.2f, next %s): %s", kind, record.turn, coordinator,
                      version, result.confidence, record.next or "-", result.reasoning or "(no reasoning given)",
                      extra={"component": "run", "orchestrator": self._orch.name})
        if self._on_event is None:
            return
        ctx = await self._orch.context()
        self._on_event(RunEvent(
            kind=kind, turn=record.turn, coordinator=coordinator, version=version, stage=ctx.conversation_stage,
            reasoning=result.reasoning if result is not None else None,
            confidence=result.confidence if result is not None else None,
            next=record.next or None, calls=calls, handoffs_in_flight=self._in_flight,
            handoffs_total=record.handoffs, interrupts=interrupts, status=status,
        ))

    async def _outcome(self, record: RunRecord, started: float, *, status: OutcomeStatus,
                       reason: str | None = None) -> RunOutcome:
        ctx = await self._orch.context()
        state = {k: v for k, v in thaw(ctx.conversation_state).items() if k not in (RUN_RECORD_KEY, RUN_CONFIG_KEY)}
        outcome = RunOutcome(
            run=self._orch.name, status=status, reason=reason or record.reason or record.status,
            turns=record.turn, version=ctx.version, handoffs=record.handoffs, handoff_errors=record.handoff_errors,
            wall_seconds=time.perf_counter() - started, state=state, stage=ctx.conversation_stage,
            pending_calls=len(ctx.pending_tool_calls), interrupts=tuple(record.open_interrupts()),
        )
        self.outcome = outcome
        return outcome


def _taken(record: RunRecord, ctx: ContextSnapshot, name: str, result: CoordinatorResult,
           outcome: Literal["applied", "fallback", "held"], **changes: Any) -> RunRecord:
    """``record`` after ``name``'s turn on ``ctx`` (one more turn, noted in the trail), with ``changes``."""
    turn = record.turn + 1
    updated = record.model_copy(update={"turn": turn, **changes})
    return updated.noted(TurnNote.of(result, coordinator=name, turn=turn, version=ctx.version + 1, outcome=outcome))


def _calls_after(ctx: ContextSnapshot, record: RunRecord, result: CoordinatorResult) -> bool:
    """Will unheld pending tool calls remain once ``result`` is committed?"""
    pending = set(ctx.pending_tool_calls)
    for t in result.transitions:
        if t.transition_type == TransitionType.EXECUTE_TOOL:
            pending.add(t.data["call_id"])
        elif t.transition_type == TransitionType.TOOL_RESULT:
            pending.discard(t.data["call_id"])
    return bool(pending - record.held_call_ids())


def _record(ctx: ContextSnapshot) -> RunRecord:
    record = read_record(ctx)
    if record is None:
        raise RunConfigError("the run record disappeared from the state; something other than the run removed it")
    return record
