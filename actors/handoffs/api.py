"""``handoff`` and ``parallel_handoff``: typed calls to subagents under the cluster-wide cap.

A handoff turns a ``Call``'s input into a JSON-clean dict, sends it to a subagent actor of
the caller's pool, and decodes the tool's JSON text into ``out_type`` (for ``str``: the text
itself, see ``_as_text``). The subagent takes the permit of the run's cluster-wide semaphore
before the body starts and gives it back once the body has returned
(``actors.handoffs.replica`` has the safety argument): the requester holds no permit, so
cancelling, timing out or pausing it never frees a permit early.
State never travels: the caller builds the input from a snapshot and merges the output
back with ``apply``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

import ray
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from actors import telemetry
from actors.callers.protocol import ToolCallResult
from actors.exceptions import (
    CallerFailed,
    DecodingError,
    EmptySkill,
    HandoffInputError,
    NoToolCaller,
    SubagentLost,
    ToolReportedError,
)
from actors.handoffs._fanout import LANE_DEPTH, Fanout
from actors.handoffs.pools import SubagentPool, pool_for
from actors.handoffs.replica import HandoffRequest, SubagentReply, retired_exit
from actors.handoffs.settings import HandoffSettings, HandoffTarget
from cluster import metrics
from cluster.semaphore import ClusterSemaphore

__all__ = ["Call", "Result", "decode_output", "handoff", "parallel_handoff"]

Out = TypeVar("Out")


class Call(BaseModel):
    """One handoff: a skill name and its input (a pydantic model, a dict, or None -> ``{}``).

    ``timeout`` (seconds) bounds the subagent call once its permit is granted; the item then
    fails with ``TimeoutError``. An async skill is cancelled; a sync skill cannot be stopped
    in its thread, so it runs to its end and keeps its permit until then (the error says
    which happened).
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    skill: str
    input: Any = None
    timeout: float | None = None

    def __init__(self, skill: str, input: Any = None, **kwargs: Any) -> None:
        super().__init__(skill=skill, input=input, **kwargs)


class Result(BaseModel, Generic[Out]):
    """The outcome of ``calls[index]``: ``output`` on success, else ``error``."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    index: int
    output: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ------------------------------------------------------------------ helpers


def _arguments(call: Call) -> dict[str, Any]:
    """The call's input as a JSON-clean dict (a private copy)."""
    value = call.input
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif not isinstance(value, dict):
        raise HandoffInputError(
            call.skill, f"handoff {call.skill!r}: input must be a pydantic model, a dict or None, got {type(value).__name__}"
        )
    try:
        clean = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise HandoffInputError(call.skill, f"handoff {call.skill!r}: input is not JSON-clean: {exc}") from exc
    if not isinstance(clean, dict):
        raise HandoffInputError(call.skill, f"handoff {call.skill!r}: input must serialise to a JSON object, got {type(clean).__name__}")
    return clean


@functools.lru_cache(maxsize=256)
def _adapter(out_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(out_type)


def _type_name(out_type: Any) -> str:
    return getattr(out_type, "__name__", repr(out_type))


def _empty_value(skill: str, out_type: Any) -> Any:
    """``out_type``'s empty value for a blank or ``null`` output, where it has one."""
    adapter = _adapter(out_type)
    candidates: tuple[Any, ...] = (None, {}, [], "")
    for candidate in candidates:
        try:
            return adapter.validate_python(candidate)
        except ValidationError:
            continue
    raise DecodingError(skill, f"handoff {skill!r}: decoding output: the tool returned nothing and {_type_name(out_type)} has no empty value")


#: How much of a tool's answer a decoding error shows.
_TEXT_PREVIEW = 200


def _as_text(raw: str) -> str:
    """A tool's answer read as ``str``. Tools of real MCP servers answer plain text, which is
    the output as it came; a JSON string literal (what a typed skill returning ``str`` sends:
    ``"abc"``) is decoded, and ``null`` is ``""``. Text that parses as JSON of another kind
    (``42``, ``{...}``) stays text: the caller asked for the text."""
    stripped = raw.strip()
    if stripped == "null":
        return ""
    if stripped.startswith('"'):
        try:
            value = json.loads(stripped)
        except ValueError:
            return raw
        if isinstance(value, str):
            return value
    return raw


def _preview(text: str) -> str:
    if len(text) <= _TEXT_PREVIEW:
        return repr(text)
    return f"{text[:_TEXT_PREVIEW]!r}... ({len(text)} characters)"


def decode_output(skill: str, result: ToolCallResult, out_type: Any) -> Any:
    """A tool's answer as the handoff's output: ``out_type`` read from the JSON of its text
    blocks (``""``/``"null"``: the type's empty value), or the text itself as ``str`` (a JSON
    string literal decoded). ``ToolReportedError`` for an answer flagged as an error,
    ``DecodingError`` naming the tool (and showing how a non-JSON text begins) otherwise."""
    if result.is_error:
        raise ToolReportedError(skill, f"handoff {skill!r}: the tool reported an error: {result.text}")
    if out_type is str:
        return _as_text(result.text)
    text = result.text.strip()
    if text in ("", "null"):
        return _empty_value(skill, out_type)
    try:
        return _adapter(out_type).validate_json(text)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors(include_url=False)):
            raise DecodingError(
                skill, f"handoff {skill!r}: decoding output as {_type_name(out_type)} failed: the tool answered text that "
                       f"is not JSON (a plain-text answer reads only as str); it begins {_preview(text)}") from exc
        raise DecodingError(skill, f"handoff {skill!r}: decoding output as {_type_name(out_type)} failed: {exc}") from exc


def _timed_out(skill: str, timeout: float | None, reply: SubagentReply) -> TimeoutError:
    if reply.stopped:
        return TimeoutError(f"handoff {skill!r} timed out after {timeout}s; the subagent's work was cancelled")
    return TimeoutError(
        f"handoff {skill!r} timed out after {timeout}s; the skill is synchronous and cannot be interrupted: "
        "it runs to its end in its subagent, which keeps its permit until it returns"
    )


#: How long one call keeps being sent again because the replica it reached had retired (each
#: time the pool creates the replica again; a retiring replica refuses a call unrun, and Ray
#: frees its name a moment after it has exited). A hang guard: a load that delays Ray's news
#: of an exit by seconds must not fail a call that never ran.
_RETIRED_PATIENCE_S = 120.0
#: How long ``_until_ended`` waits for one retiring replica to be gone before the call is
#: sent again (and, should it still be there, refused again, unrun).
_ENDING_WAIT_S = 5.0
#: Ray's words for a call it failed without sending it, because the actor was restarting (a
#: replica killed and being restarted; ``max_task_retries=0`` fails such calls at once): the
#: call never reached the replica, so it is sent again, like one a retiring replica refused.
_UNSENT_RESTARTING = "The actor is restarting."


async def _send(pool: SubagentPool, request: HandoffRequest, fanout: Fanout | None) -> tuple[SubagentReply, float]:
    """One request to one replica of ``pool`` (on a lane of ``fanout``, if any), answered;
    ``retired`` (unrun) if that replica had retired. With the reply: how long the call
    waited for a started replica."""
    lane = ticket = None
    slot_wanted = None
    own = 0
    if fanout is not None:
        lane, ticket = fanout.route()
        slot_wanted = fanout.slot_of(lane, pool.name)
        own = fanout.on_slot(lane, pool.name, slot_wanted)
        request = request.model_copy(update={"lane": lane, "ticket": ticket})
        # The lane counts this item from now on: the pick below may wait for a replica to
        # start, and the batch's next items must meanwhile go to the other lanes.
        fanout.sent(lane, ticket, pool.name)
    try:
        slot, actor, started_wait = await pool.pick(slot_wanted, own)
    except BaseException:
        if fanout is not None:
            fanout.over(lane, ticket)  # type: ignore[arg-type]
        raise
    if fanout is not None:
        fanout.bound(lane, ticket, slot, actor)  # type: ignore[arg-type]
    try:
        ref = actor.handoff_call.remote(request.wire())
        try:
            reply = SubagentReply.of_wire(await ref)
        except asyncio.CancelledError:
            # The subagent cancels the body; its permit is given back when the body has returned
            # (for a sync skill: when its thread does, see ``Interruptible``). Not recursive: Ray
            # would also drop the body's own actor calls still queued in its process, and an actor
            # that executes its callers' calls in order then waits 30 s for the missing one and
            # fails every later call of that subagent to it. The body's own work stops with the
            # body (its awaits are cancelled; a nested handoff cancels its subagent like this).
            ray.cancel(ref, recursive=False)
            raise
        if reply.retired:  # refused unrun: the replica is ending; wait until it has, then re-create
            await _until_ended(actor)
            pool.retired(slot, actor)
        return reply, started_wait
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError, ray.exceptions.NodeDiedError) as exc:
        if retired_exit(exc):  # it had retired before the call reached it: the call never ran
            pool.retired(slot, actor)
            return SubagentReply(retired=True), started_wait
        pool.forget(slot, actor)
        ClusterSemaphore.report_lost(request.scope, actor)  # its semaphore asks Ray now, not a TTL later
        if isinstance(exc, ray.exceptions.ActorUnavailableError) and _UNSENT_RESTARTING in str(exc):
            return SubagentReply(retired=True), started_wait  # never sent: it is sent again
        raise SubagentLost(request.skill, f"handoff {request.skill!r}: the subagent serving it was lost ({type(exc).__name__}); retry the call") from exc
    finally:
        pool.returned(slot)
        if fanout is not None:
            fanout.over(lane, ticket)  # type: ignore[arg-type]


async def _until_ended(actor: Any) -> None:
    """Until a replica that refused a call as retiring has exited (its name is then free for
    the replica the pool creates next), at most ``_ENDING_WAIT_S``. It exits once the call
    that retired it returns; an exiting actor runs no new call, so a ping may go unanswered."""
    deadline = time.monotonic() + _ENDING_WAIT_S
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(asyncio.wrap_future(actor.ping.remote().future()), timeout=1.0)
        except ray.exceptions.RayActorError:
            return
        except TimeoutError:
            continue  # unanswered: it is exiting; ask until Ray reports it gone
        await asyncio.sleep(0.01)


async def _call_subagent(caller: Any, request: HandoffRequest, orchestrator: str, fanout: Fanout | None) -> ToolCallResult:
    skill = request.skill
    pool = pool_for(caller, skill)
    outcome, node = "error", ""
    try:
        reply, started_wait = await _send(pool, request, fanout)
        resends = 0
        first_refusal = 0.0
        # Not run: taken back unstarted for a lane that went idle (send it there), or refused
        # by a replica that retired (send it to the one the pool creates in its place).
        while not reply.ran:
            if reply.retired:
                resends += 1
                if resends == 1:
                    first_refusal = time.monotonic()
                elif time.monotonic() - first_refusal > _RETIRED_PATIENCE_S:
                    raise SubagentLost(skill, f"handoff {skill!r}: replicas kept retiring as the call reached them "
                                              f"({resends} times in {_RETIRED_PATIENCE_S:g}s); the call never ran; retry it")
                # Ray frees a retired replica's name a moment after it exits; until then, the
                # pool's re-creation joins the exited actor again: give it that moment.
                await asyncio.sleep(min(0.01 * resends, 0.2))
            reply, waited = await _send(pool, request, fanout)
            started_wait += waited
        node = reply.node
        if reply.usage is not None:  # the tokens of this run's agent (the skill), from the body's model calls
            metrics.record_run_tokens(orchestrator, skill, reply.usage.input_tokens, reply.usage.output_tokens)
        telemetry.record_semaphore_wait(orchestrator, reply.waited_s)
        telemetry.record_queue_wait(pool.key, skill, started_wait + reply.queued_s)
        if reply.timed_out:
            outcome = "cancelled"
            raise _timed_out(skill, request.timeout, reply)
        assert reply.result is not None
        outcome = "tool_error" if reply.result.is_error else "ok"
        return reply.result
    except ray.exceptions.RayTaskError as exc:
        # First: Ray's error for a caller that raised TimeoutError also *is* a TimeoutError.
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        raise CallerFailed(skill, f"handoff {skill!r}: the caller failed: {type(cause).__name__}: {cause}") from cause
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        telemetry.record_subagent_call(orchestrator, skill, node, outcome)


async def _dispatch(
    run: HandoffSettings, call: Call, out_type: Any, *, limit: int, timeout: float | None, fanout: Fanout | None = None
) -> Any:
    """One handoff, start to finish: check, permit, subagent call, decode."""
    if not isinstance(call, Call):
        raise TypeError(f"handoff takes a Call, got {type(call).__name__}")
    skill = call.skill
    if not skill or not skill.strip():
        raise EmptySkill("", "handoff: empty skill name; set Call.skill to the name of a registered skill")
    caller = run.caller
    if caller is None:
        raise NoToolCaller(skill, f"handoff {skill!r}: the orchestrator has no ToolCaller; pass caller=... to Orchestrator(...)")
    arguments = _arguments(call)
    timeout = call.timeout if call.timeout is not None else timeout
    logger = run.logger
    started = time.perf_counter()
    error: BaseException | None = None
    with telemetry.handoff_span(run.tracer, skill) as span:
        try:
            request = HandoffRequest(skill=skill, arguments=arguments, trace_context=telemetry.current_carrier(),
                                     scope=run.semaphore_scope, limit=limit, timeout=timeout)
            if fanout is None:
                with telemetry.in_flight(run.name):
                    result = await _call_subagent(caller, request, run.name, None)
            else:  # the fan-out counts its busy lanes
                result = await _call_subagent(caller, request, run.name, fanout)
            return decode_output(skill, result, out_type)
        except BaseException as exc:
            error = exc
            raise
        finally:
            telemetry.mark_handoff(span, error)
            telemetry.record_handoff(run.name, skill, error, time.perf_counter() - started)
            if error is not None and not isinstance(error, asyncio.CancelledError):
                logger.warning(
                    "handoff %s failed after %.3fs: %s", skill, time.perf_counter() - started, error,
                    extra={"skill": skill},
                )


@functools.lru_cache(maxsize=64)
def _is_target_type(cls: type) -> bool:
    # Per type, once: ``isinstance`` against a runtime-checkable protocol walks its members
    # on every call, and this runs for every handoff. (Its members are methods only, so
    # ``issubclass`` works and says the same as ``isinstance``.)
    return issubclass(cls, HandoffTarget)


def _check_orchestrator(orch: Any) -> None:
    if not _is_target_type(type(orch)):  # type: ignore[arg-type]  # a class is hashable; typeshed's Hashable does not say so of type[Any]
        raise TypeError(f"handoffs need an Orchestrator, got {type(orch).__name__}")


# ------------------------------------------------------------------ public


async def handoff(orch: HandoffTarget, call: Call, out_type: type[Out], *, timeout: float | None = None) -> Out:
    """Run one call in a subagent and return its output as an ``out_type`` instance.

    Raises ``EmptySkill``, ``HandoffInputError``, ``NoToolCaller``, ``CallerFailed`` (cause
    chained; ``SubagentLost`` when the actor died), ``ToolReportedError`` or
    ``DecodingError``, each naming the skill; ``TimeoutError`` after ``timeout``.
    """
    _check_orchestrator(orch)
    run = orch.handoff_settings()
    if run.caller is not None:  # else _dispatch raises NoToolCaller: no scope to join
        await orch.join_semaphore()
    return await _dispatch(run, call, out_type, limit=run.max_parallel, timeout=timeout)


async def parallel_handoff(
    orch: HandoffTarget, calls: Iterable[Call], out_type: type[Out], *, timeout: float | None = None,
    on_result: Callable[[Result[Out]], Awaitable[None]] | None = None,
) -> list[Result[Out]]:
    """Run every call, at most the run's cap in flight across the whole cluster.

    ``results[i]`` is the outcome of ``calls[i]``; a failed item carries its exception in
    ``Result.error`` and never fails the batch. Cancelling the awaiting task cancels the
    subagents' in-flight work and starts nothing new; each permit is freed by its subagent
    once its body has stopped (a synchronous body: once its thread has returned).

    With more calls than the cap, the batch runs ``cap`` lanes, and each lane's next call
    already waits in its subagent (holding no permit) to start the moment the one before has
    returned (``actors.handoffs._fanout``). A call still waiting when another lane has gone
    idle moves there; a call that has started never runs again. A subagent that is lost
    fails its running call and the one waiting behind it, with ``SubagentLost``.

    ``on_result`` (optional) is awaited with each item's ``Result`` the moment it returns,
    before the batch ends (e.g. to commit it at once, so a crash mid-batch loses no finished
    item). It runs in the item's lane: the lane takes its next call once it has returned. If
    it raises, the batch fails with that error (the other items are cancelled).
    """
    _check_orchestrator(orch)
    calls = list(calls)
    if not calls:
        return []
    await orch.join_semaphore()
    await orch.refresh_max_parallel()
    run = orch.handoff_settings()
    cap, requested = run.max_parallel, run.requested_max_parallel
    if requested > cap:
        run.logger.warning(
            "max_parallel %d is above the hard ceiling; clamped to %d for this parallel handoff", requested, cap,
            extra={"skill": ",".join(sorted({c.skill for c in calls if isinstance(c, Call)}))},
        )
    results: list[Result[Out] | None] = [None] * len(calls)
    pending = iter(enumerate(calls))
    # More items than the cap: lanes, each keeping its next item waiting in its replica.
    fanout = Fanout(cap, run.name) if len(calls) > cap else None
    workers_wanted = cap * LANE_DEPTH if fanout is not None else len(calls)

    async def worker() -> None:
        for index, call in pending:
            try:
                output = await _dispatch(run, call, out_type, limit=cap, timeout=timeout, fanout=fanout)
            except Exception as exc:
                result: Result[Out] = Result(index=index, error=exc)
            else:
                result = Result(index=index, output=output)
            results[index] = result
            if on_result is not None:
                await on_result(result)
        if fanout is not None:
            await fanout.rebalance()

    with telemetry.parallel_span(run.tracer, len(calls), cap) as span:
        workers = [asyncio.ensure_future(worker()) for _ in range(min(workers_wanted, len(calls)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for w in workers:
                w.cancel()
            await asyncio.wait(workers)  # every subagent call cancelled; permits follow their bodies
            raise
        telemetry.mark_error(span, sum(1 for r in results if r is not None and r.error is not None))
    telemetry.batch_finished()
    return [r for r in results if r is not None]
