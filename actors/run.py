"""``Run``: drive an orchestrator with your own coordinators, turn by turn, resumably.

Each turn one coordinator (hosted in a stateless Ray actor, given only the snapshot and the
message) returns a ``CoordinatorResult``; its transitions are committed as a compare-and-set
on the version it saw, together with the run record (``actors.interrupts.RunRecord``) that
says where the run now is. Pending tool calls are vetted by the vetting coordinator (if
any), handed off in parallel under the run's cap, and their results committed in one batch,
again with the record. So the record in the committed state is always exactly "what is done
and what is next": a resumed run (after a wait for approval, a dead driver or a restarted
orchestrator actor) never repeats a committed turn or handoff.

Routing: ``should_continue=False`` ends the run; ``handoff_to`` names the next coordinator
(else the fallback); a result below ``confidence_threshold`` is set aside for the fallback,
or held for approval (``low_confidence="approval"``). A coordinator asks for approval with
``ask_approval``: the run stops in ``waiting`` with the interrupts open in its state.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

import cloudpickle
import ray

from actors.exceptions import RunConfigError, RunStepError, VersionConflict
from actors.handoffs.api import Call, parallel_handoff
from actors.interrupts import (
    FINAL_STATUSES,
    RUN_CONFIG_KEY,
    RUN_RECORD_KEY,
    Interrupt,
    RunRecord,
    TurnNote,
    approval_requests,
    read_record,
    record_transition,
)
from actors.orchestrator.facade import Orchestrator
from actors.run_events import RunEvent, RunOutcome
from actors.agents.coordinator_host import coordinator_config, create_coordinator_actor
from coordinators import (ContextSnapshot, Coordinator, CoordinatorResult, StateTransition, TransitionBatch, TransitionType,
                          thaw)

__all__ = ["Run"]

_log = logging.getLogger("soloist.run")

LowConfidence = Literal["fallback", "approval"]
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
        if not isinstance(orchestrator, Orchestrator):
            raise RunConfigError(f"Run(orchestrator=...) takes an actors.Orchestrator, got {type(orchestrator).__name__}")
        if isinstance(coordinators, Mapping):
            table = dict(coordinators)
        else:
            table = {}
            for c in coordinators:
                name = getattr(c, "name", None)
                if not isinstance(name, str) or not name:
                    raise RunConfigError(f"coordinator {c!r} has no name; give it a `name` attribute or pass a dict")
                if name in table:
                    raise RunConfigError(f"two coordinators are named {name!r}; names must be unique")
                table[name] = c
        problems = [f"{n!r} has no async process(snapshot, message)" for n, c in table.items()
                    if not callable(getattr(c, "process", None))]
        fallback = first if fallback is None else fallback
        for role, name in (("first", first), ("fallback", fallback), ("vetting", vetting)):
            if name is not None and name not in table:
                problems.append(f"{role}={name!r} is not one of the coordinators ({', '.join(sorted(table)) or 'none'})")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            problems.append(f"max_turns must be an int >= 1, got {max_turns!r}")
        if isinstance(confidence_threshold, bool) or not isinstance(confidence_threshold, (int, float)) \
                or not 0.0 <= confidence_threshold <= 1.0:
            problems.append(f"confidence_threshold must be in [0, 1], got {confidence_threshold!r}")
        if low_confidence not in ("fallback", "approval"):
            problems.append(f"low_confidence must be 'fallback' or 'approval', got {low_confidence!r}")
        if problems:
            raise RunConfigError("bad Run configuration: " + "; ".join(problems))
        self._orch = orchestrator
        self._coordinators = table
        self._first, self._fallback, self._vetting = first, fallback, vetting
        self._max_turns = max_turns
        self._threshold = float(confidence_threshold)
        self._low_confidence: LowConfidence = low_confidence
        self._on_event = on_event
        self._actors: dict[str, Any] = {}  # coordinator name -> its actor, for the current drive only
        self._in_flight = 0
        self.outcome: RunOutcome | None = None
        """The outcome of the last ``run``/``resume``/``stream`` (None before)."""

    # ------------------------------------------------------------------ public

    @classmethod
    async def restore(cls, orchestrator: Orchestrator[Any], *, on_event: Callable[[RunEvent], None] | None = None,
                      max_turns: int | None = None) -> "Run":
        """The ``Run`` that started in ``orchestrator``'s state, rebuilt from what it stored
        when it started (its coordinators, pickled, and its settings), e.g. to ``resume()``
        it from another process. ``max_turns`` raises (or lowers) the stored limit."""
        ctx = await orchestrator.context()
        raw = ctx.get_state(RUN_CONFIG_KEY)
        if raw is None:
            raise RunConfigError(f"run {orchestrator.name!r} holds no stored run configuration; it was not started by Run.run()")
        config = thaw(raw)
        try:
            table = {name: cloudpickle.loads(base64.b64decode(blob)) for name, blob in config["coordinators"].items()}
        except Exception as exc:
            raise RunConfigError(
                f"the coordinators of run {orchestrator.name!r} cannot be loaded here ({type(exc).__name__}: {exc}); "
                "make their code importable in this process, or build the Run yourself and call resume()"
            ) from exc
        return cls(orchestrator, table, first=config["first"], fallback=config["fallback"], vetting=config["vetting"],
                   max_turns=max_turns or config["max_turns"], confidence_threshold=config["confidence_threshold"],
                   low_confidence=config["low_confidence"], on_event=on_event)

    @property
    def orchestrator(self) -> Orchestrator[Any]:
        return self._orch

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
        if not await self._orch.interrupts():
            return
        async with contextlib.aclosing(self._orch.subscribe(since=version)) as changes:
            async for _change in changes:
                if not await self._orch.interrupts():
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
        """The open interrupts of this run."""
        return await self._orch.interrupts()

    async def answer(self, interrupt_id: str, *, approve: bool, reason: str | None = None) -> int:
        """Answer one open interrupt (see ``Orchestrator.answer``); then ``resume()``."""
        return await self._orch.answer(interrupt_id, approve=approve, reason=reason)

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
            record = RunRecord(message=message, next=self._first)
            config = StateTransition(TransitionType.UPDATE_STATE, {"key": RUN_CONFIG_KEY, "value": self._config()})
            await self._orch.apply_batch([config, record_transition(record)], expected_version=ctx.version)
            await self._orch._mark_run(status="running", updated_at=time.time())
        elif record is None:
            raise RunConfigError(f"run {self._orch.name!r} has no run to resume: its state holds no run record; use run(message)")
        elif record.status in FINAL_STATUSES:
            return await self._outcome(record, started)
        elif record.open_interrupts():
            return await self._outcome(record, started, status="waiting",
                                       reason=f"waiting for {len(record.open_interrupts())} approval(s)")
        else:
            await self._emit("resumed", record, ctx.version, coordinator=record.next or "-")
        status, reason = "max_turns", f"stopped after the maximum of {self._max_turns} turns"
        ended = False  # True once the run reached a final status (its coordinators are then closed for good)
        try:
            self._start_actors()
            await self._record_created()
            while True:
                ctx = await self._orch.context()
                record = _record(ctx)
                if record.open_interrupts():
                    status, reason = "waiting", f"waiting for {len(record.open_interrupts())} approval(s)"
                    break
                if not record.next:  # a held final turn was approved
                    status, reason = await self._finish(ctx, record, record.reason or "done")
                    break
                if record.phase == "vet":
                    await self._vet(ctx, record)
                elif record.phase == "calls":
                    await self._run_calls(ctx, record)
                elif record.turn >= self._max_turns:
                    await self._finish(ctx, record, reason, status="max_turns")
                    break
                else:
                    await self._turn(ctx, record, record.next)
                end = _record(await self._orch.context())
                if end.status in FINAL_STATUSES:
                    status, reason = end.status, end.reason or end.status
                    break
        except asyncio.CancelledError:
            # Cancellation is this run's "stop now": close pending calls and report it.
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            ctx = await asyncio.shield(self._orch.context())
            await asyncio.shield(self._finish(ctx, _record(ctx), "cancelled by the user (in-flight handoffs were cancelled)",
                                              status="cancelled"))
            status, reason = "cancelled", "cancelled by the user (in-flight handoffs were cancelled)"
        else:
            ended = status != "waiting"
        finally:
            await self._stop_actors(final=ended or status == "cancelled")
        final = _record(await self._orch.context())
        if status == "waiting":
            await self._orch._mark_run(status="waiting", updated_at=time.time())
        return await self._outcome(final, started, status=status, reason=reason)

    async def _turn(self, ctx: ContextSnapshot, record: RunRecord, name: str) -> None:
        """One coordinator turn, committed with the record as a compare-and-set."""
        result = await self._process(name, ctx, record)
        if name != self._fallback and result.confidence < self._threshold:
            if self._low_confidence == "fallback":
                updated = record.model_copy(update={"turn": record.turn + 1, "next": self._fallback, "phase": "turn"})
                updated = updated.noted(TurnNote.of(result, coordinator=name, turn=record.turn + 1, version=ctx.version + 1,
                                                    outcome="fallback"))
                if await self._commit(TransitionBatch(), updated, ctx.version) is not None:
                    await self._emit("low_confidence", updated, ctx.version + 1, coordinator=name, result=result)
                return
            await self._hold_turn(ctx, record, name, result, question={
                "reason": "low confidence", "coordinator": name, "confidence": result.confidence,
                "threshold": self._threshold, "reasoning": result.reasoning})
            return
        requests = approval_requests(result, name)
        if any(r.whole_turn for r in requests):
            questions = [r.question for r in requests if r.whole_turn]
            await self._hold_turn(ctx, record, name, result, question=questions[0] if len(questions) == 1 else questions)
            return
        next_name, phase = self._route(name, result, ctx, record)
        updated = record.model_copy(update={"turn": record.turn + 1, "next": next_name, "phase": phase})
        updated = updated.noted(TurnNote.of(result, coordinator=name, turn=record.turn + 1, version=ctx.version + 1,
                                            outcome="applied"))
        own_calls = [t.data["call_id"] for t in result.transitions if t.transition_type == TransitionType.EXECUTE_TOOL]
        updated, opened = self._open_call_interrupts(updated, name, result, requests, own_calls, ctx)
        if not result.should_continue:
            updated = updated.model_copy(update={"next": "", "reason": result.reasoning or f"{name} stopped the run"})
        version = await self._commit(result.transitions, updated, ctx.version)
        if version is None:
            return  # someone else wrote in between: decide again on the new snapshot
        await self._emit("turn", updated, version, coordinator=name, result=result)
        if opened:
            await self._emit("interrupt", updated, version, coordinator=name, interrupts=opened)
        if not result.should_continue and not opened:
            await self._finish(await self._orch.context(), updated, updated.reason or "done", by=name)

    def _route(self, name: str, result: CoordinatorResult, ctx: ContextSnapshot, record: RunRecord) -> tuple[str, str]:
        """(next coordinator, phase) after ``name``'s committed turn."""
        target = result.handoff_to
        if not _calls_after(ctx, record, result):
            if target is not None and target not in self._coordinators:
                raise RunStepError(
                    f"coordinator {name!r} handed off to {target!r}, which this run does not have "
                    f"({', '.join(sorted(self._coordinators))})"
                )
            return target or self._fallback, "turn"
        if target is not None and target not in self._coordinators:
            raise RunStepError(
                f"coordinator {name!r} handed off to {target!r}, which this run does not have ({', '.join(sorted(self._coordinators))})"
            )
        if name == self._vetting:
            return target or self._fallback, "calls"
        if target is not None and target == self._vetting:
            return target, "turn"
        return target or self._fallback, "vet" if self._vetting else "calls"

    async def _hold_turn(self, ctx: ContextSnapshot, record: RunRecord, name: str, result: CoordinatorResult,
                         question: Any) -> None:
        """Open a ``turn`` interrupt: the result's transitions wait for a person's approval."""
        next_name, phase = self._route(name, result, ctx, record)
        interrupt_id = f"{self._orch.name}/i{record.opened + 1}"
        held = {
            "transitions": [t.model_dump(mode="json") for t in result.transitions],
            "next": next_name, "phase": phase, "stop": not result.should_continue,
            "reasoning": result.reasoning, "on_reject": self._fallback,
        }
        interrupt = Interrupt(id=interrupt_id, kind="turn", question=thaw(question), coordinator=name, turn=record.turn + 1,
                              opened_version=ctx.version + 1, confidence=result.confidence, held=held)
        updated = record.model_copy(update={
            "turn": record.turn + 1, "status": "waiting", "opened": record.opened + 1,
            "interrupts": {**record.interrupts, interrupt_id: interrupt}})
        updated = updated.noted(TurnNote.of(result, coordinator=name, turn=record.turn + 1, version=ctx.version + 1,
                                            outcome="held"))
        version = await self._commit(TransitionBatch(), updated, ctx.version)
        if version is not None:
            await self._emit("interrupt", updated, version, coordinator=name, result=result, interrupts=(interrupt_id,))

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
                call_ids = tuple(own_calls) or (tuple(pending) if name == self._vetting else ())
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

    async def _vet(self, ctx: ContextSnapshot, record: RunRecord) -> None:
        """Let the vetting coordinator see the pending calls (if any) before they run."""
        held = record.held_call_ids()
        if not any(c not in held for c in ctx.pending_tool_calls) or self._vetting is None:
            await self._run_calls(ctx, record.model_copy(update={"phase": "calls"}))
            return
        result = await self._process(self._vetting, ctx, record)
        requests = approval_requests(result, self._vetting) if result.metadata else []
        updated = record.model_copy(update={"turn": record.turn + 1, "phase": "calls"})
        updated = updated.noted(TurnNote.of(result, coordinator=self._vetting, turn=record.turn + 1,
                                            version=ctx.version + 1, outcome="applied"))
        own = [t.data["call_id"] for t in result.transitions if t.transition_type == TransitionType.EXECUTE_TOOL]
        updated, opened = self._open_call_interrupts(updated, self._vetting, result, requests, own, ctx)
        if not result.should_continue:
            updated = updated.model_copy(update={"next": "", "reason": result.reasoning or "stopped by the vetting coordinator"})
        version = await self._commit(result.transitions, updated, ctx.version)
        if version is None:
            return
        await self._emit("turn", updated, version, coordinator=self._vetting, result=result)
        if opened:
            await self._emit("interrupt", updated, version, coordinator=self._vetting, interrupts=opened)
        if not result.should_continue:
            await self._finish(await self._orch.context(), updated, updated.reason or "stopped", by=self._vetting)

    async def _run_calls(self, ctx: ContextSnapshot, record: RunRecord) -> None:
        """Hand off every pending call not held for approval; commit the results with the record."""
        held = record.held_call_ids()
        pending = [p for cid, p in ctx.pending_tool_calls.items() if cid not in held]
        done = record.model_copy(update={"phase": "turn"})
        if not pending:
            await self._commit(TransitionBatch(), done, ctx.version)
            return
        calls = [Call(p.tool_name, thaw(p.arguments)) for p in pending]
        self._in_flight = len(calls)
        await self._emit("handoffs", record, ctx.version, coordinator="handoffs", calls=tuple(c.skill for c in calls))
        try:
            results = await parallel_handoff(self._orch, calls, dict)
        finally:
            self._in_flight = 0
        batch = TransitionBatch()
        errors = 0
        for p, r in zip(pending, results):
            if r.ok:
                batch.tool_result(p.call_id, r.output)
            else:
                errors += 1
                batch.tool_result(p.call_id, {"error": f"{type(r.error).__name__}: {r.error}"}, is_error=True)
        done = done.model_copy(update={"handoffs": record.handoffs + len(calls), "handoff_errors": record.handoff_errors + errors})
        version = await self._commit(batch, done, ctx.version, retry=True)
        await self._emit("handoffs", done, version or ctx.version, coordinator="handoffs")

    async def _finish(self, ctx: ContextSnapshot, record: RunRecord, reason: str, status: str | None = None,
                      by: str | None = None) -> tuple[str, str]:
        """End the run: close every pending call with an error and record the final status."""
        final_status = status or ("complete" if ctx.is_complete else "stopped")
        batch = TransitionBatch()
        for call_id in ctx.pending_tool_calls:
            batch.tool_result(call_id, {"error": reason}, is_error=True)
        final = record.model_copy(update={"status": final_status, "reason": reason, "next": ""})
        version = await self._commit(batch, final, ctx.version, retry=True)
        await self._orch._mark_run(status=final_status, finished_at=time.time())
        await self._emit("finished", final, version or ctx.version, coordinator=by or record.next or "-", status=final_status)
        return final_status, reason

    # ---------------------------------------------------------------- helpers

    async def _process(self, name: str, ctx: ContextSnapshot, record: RunRecord) -> CoordinatorResult:
        await self._orch._agent_changed(_agent_id(name), "running")
        try:
            result = await self._actors[name].process.remote(ctx, record.message)
        except Exception as exc:  # recorded, then re-raised (cancellation is not an error)
            await self._orch._agent_changed(_agent_id(name), "error", f"{type(exc).__name__}: {exc}")
            raise
        await self._orch._agent_changed(_agent_id(name), "idle")
        if not isinstance(result, CoordinatorResult):
            raise RunStepError(f"coordinator {name!r} returned a {type(result).__name__}, not a CoordinatorResult")
        return result

    async def _commit(self, transitions: Any, record: RunRecord, expected: int, *, retry: bool = False) -> int | None:
        """Commit ``transitions`` plus the record at ``expected``; None on a version conflict
        (or, with ``retry``, re-read the record and try again: the step's outcome stands)."""
        batch = TransitionBatch()
        batch.extend(transitions)
        if record.status == "running" or record.status == "waiting" and not record.open_interrupts():
            record = record.model_copy(update={"status": "running"})
        batch.add(record_transition(record))
        while True:
            try:
                return await self._orch.apply_batch(batch, expected_version=expected)
            except VersionConflict:
                if not retry:
                    return None
                expected = await self._orch.version()

    def _config(self) -> dict[str, Any]:
        """What ``restore`` needs to rebuild this run elsewhere (JSON-clean)."""
        return {
            "first": self._first, "fallback": self._fallback, "vetting": self._vetting, "max_turns": self._max_turns,
            "confidence_threshold": self._threshold, "low_confidence": self._low_confidence,
            "coordinators": {name: base64.b64encode(cloudpickle.dumps(c)).decode("ascii") for name, c in self._coordinators.items()},
        }

    def _start_actors(self) -> None:
        self._actors = {name: create_coordinator_actor(c) for name, c in self._coordinators.items()}

    async def _stop_actors(self, *, final: bool) -> None:
        """Kill this drive's coordinator actors; their records end ``closed`` when the run is
        over, ``idle`` when it waits (a resumed drive re-creates them)."""
        actors, self._actors = self._actors, {}
        for actor in actors.values():
            ray.kill(actor)
        for name in actors:
            await self._orch._agent_changed(_agent_id(name), "closed" if final else "idle")

    async def _record_created(self) -> None:
        """Record every coordinator actor as a managed agent of the run (with how to re-create it)."""
        for name, actor in self._actors.items():
            config = coordinator_config(self._coordinators[name])
            await self._orch._agent_created(_agent_id(name), "coordinator", config, actor)

    async def _emit(self, kind: str, record: RunRecord, version: int, *, coordinator: str, result: CoordinatorResult | None = None,
                    calls: tuple[str, ...] = (), interrupts: tuple[str, ...] = (), status: str | None = None) -> None:
        if result is not None:  # every coordinator decision is logged with its reasoning and confidence
            _log.info("%s turn %d by %s at version %d (confidence %.2f, next %s): %s", kind, record.turn, coordinator,
                      version, result.confidence, record.next or "-", result.reasoning or "(no reasoning given)",
                      extra={"component": "run", "orchestrator": self._orch.name})
        if self._on_event is None:
            return
        ctx = await self._orch.context()
        self._on_event(RunEvent(
            kind=kind,  # type: ignore[arg-type]
            turn=record.turn, coordinator=coordinator, version=version, stage=ctx.conversation_stage,
            reasoning=result.reasoning if result is not None else None,
            confidence=result.confidence if result is not None else None,
            next=record.next or None, calls=calls, handoffs_in_flight=self._in_flight,
            handoffs_total=record.handoffs, interrupts=interrupts, status=status,
        ))

    async def _outcome(self, record: RunRecord, started: float, *, status: str | None = None,
                       reason: str | None = None) -> RunOutcome:
        ctx = await self._orch.context()
        state = {k: v for k, v in thaw(ctx.conversation_state).items() if k not in (RUN_RECORD_KEY, RUN_CONFIG_KEY)}
        outcome = RunOutcome(
            run=self._orch.name,
            status=status or record.status,  # type: ignore[arg-type]
            reason=reason or record.reason or record.status,
            turns=record.turn, version=ctx.version, handoffs=record.handoffs, handoff_errors=record.handoff_errors,
            wall_seconds=time.perf_counter() - started, state=state, stage=ctx.conversation_stage,
            pending_calls=len(ctx.pending_tool_calls), interrupts=tuple(record.open_interrupts()),
        )
        self.outcome = outcome
        return outcome


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
