"""Human approval: interrupts, and the run record that keeps them in the run's own state.

A run driven by ``Run`` keeps one typed :class:`RunRecord` in its ``AgentState`` (under
``conversation_state[RUN_RECORD_KEY]``): where the run is (turn, next coordinator, phase),
its status, and every interrupt it opened. Because the record is part of the state, it is
journalled, checkpointed, replayed after a crash, shown by ``history`` and copied by
``fork`` exactly like the rest of the state, and every change to it is one committed
version, written in the same batch as the transitions it goes with.

A coordinator asks for approval by attaching :class:`ApprovalRequest`\\ s to its result
(``ask_approval``). Answers are turned into one batch here (pure functions, no Ray); a
refused answer raises before anything is written.
"""

from __future__ import annotations

from typing import Any, Literal, TypeGuard, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from actors.exceptions import InterruptAlreadyAnswered, InterruptNotFound, RunStepError
from coordinators import CoordinatorResult, StateTransition, TransitionBatch, TransitionType, thaw

__all__ = [
    "RUN_CONFIG_KEY",
    "RUN_RECORD_KEY",
    "ApprovalRequest",
    "Interrupt",
    "InterruptKind",
    "InterruptStatus",
    "RunPhase",
    "RunRecord",
    "RunStatus",
    "FinalStatus",
    "FINAL_STATUSES",
    "is_final",
    "TurnNote",
    "MAX_TRAIL",
    "ask_approval",
    "answer_batch",
    "approval_requests",
    "read_record",
    "record_transition",
]

#: Where the run record lives in ``AgentState.conversation_state``.
RUN_RECORD_KEY = "soloist.run"
#: Where ``Run`` stores, once, what ``Run.restore`` needs (settings, pickled coordinators).
RUN_CONFIG_KEY = "soloist.run.config"
_REQUESTS_KEY = "soloist.approval"

#: ``running``: a driver is (or was, until it died) moving the run on; ``waiting``: stopped
#: on interrupts (open ones, or answered ones not yet resumed); the rest are final.
FinalStatus = Literal["complete", "stopped", "max_turns", "cancelled", "failed"]
RunStatus = Literal["running", "waiting", FinalStatus]
FINAL_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))
#: ``turn``: the next coordinator turn is due; ``vet``: pending calls await the vetting
#: coordinator; ``calls``: pending calls are vetted and due to be handed off.
RunPhase = Literal["turn", "vet", "calls"]
#: ``tool_calls``: some pending calls wait for approval; ``turn``: a whole coordinator turn
#: (its transitions are held, not applied) waits for approval.
InterruptKind = Literal["tool_calls", "turn"]
InterruptStatus = Literal["open", "approved", "rejected"]


class ApprovalRequest(BaseModel):
    """What a coordinator asks a person: ``question`` (any JSON), about some of the tool
    calls its result requests (``call_ids``; None: every call of the result) or about the
    whole turn (``whole_turn``: its transitions are applied only if approved)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question: JsonValue
    call_ids: tuple[str, ...] | None = None
    whole_turn: bool = False


class Interrupt(BaseModel):
    """One request for approval, as recorded in the run's state.

    ``id`` is unique within the run and names it (``RUN/iN``); ``opened_version`` is the
    version that opened it; ``held`` is the turn waiting for approval (kind ``turn`` only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: InterruptKind
    question: JsonValue
    call_ids: tuple[str, ...] = ()
    coordinator: str
    turn: int
    opened_version: int
    status: InterruptStatus = "open"
    reason: str | None = None
    answered_version: int | None = None
    confidence: float = 1.0
    held: dict[str, Any] | None = None
    """Kind ``turn``: ``transitions`` (JSON), ``next`` (coordinator after it), ``stop``
    (the turn ended the run), ``reasoning``; and ``on_reject`` (coordinator if rejected)."""

    @property
    def is_open(self) -> bool:
        return self.status == "open"


#: How many coordinator turns the run record keeps in its ``trail`` (the newest).
MAX_TRAIL = 100
_MAX_REASONING_CHARS = 2000


class TurnNote(BaseModel):
    """One coordinator turn as the run took it, kept in the record's ``trail`` so that the
    reasoning and confidence of every turn can be read back from the state (``history``,
    ``soloist ui``), not only from the live event stream.

    ``version`` is the version that committed the turn; ``outcome`` says what the run did
    with the result: ``applied``, ``fallback`` (below the confidence threshold, the fallback
    takes the turn) or ``held`` (waiting for approval).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    turn: int
    coordinator: str
    reasoning: str = ""
    confidence: float
    outcome: Literal["applied", "fallback", "held"]

    @classmethod
    def of(cls, result: CoordinatorResult, *, coordinator: str, turn: int, version: int,
           outcome: Literal["applied", "fallback", "held"]) -> TurnNote:
        reasoning = result.reasoning or ""
        if len(reasoning) > _MAX_REASONING_CHARS:
            reasoning = reasoning[:_MAX_REASONING_CHARS] + "…"
        return cls(version=version, turn=turn, coordinator=coordinator, reasoning=reasoning,
                   confidence=result.confidence, outcome=outcome)


class RunRecord(BaseModel):
    """Where a run is; changed only in the same batch as the transitions it describes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: RunStatus = "running"
    message: str = ""
    turn: int = 0
    next: str = ""
    phase: RunPhase = "turn"
    reason: str | None = None
    interrupts: dict[str, Interrupt] = Field(default_factory=dict)
    opened: int = 0
    """Interrupts opened so far (numbers the next id)."""
    handoffs: int = 0
    handoff_errors: int = 0
    trail: tuple[TurnNote, ...] = ()
    """The last ``MAX_TRAIL`` coordinator turns, oldest first."""

    @field_validator("interrupts", mode="before")
    @classmethod
    def _thawed(cls, value: Any) -> Any:
        return thaw(value)

    def noted(self, note: TurnNote) -> RunRecord:
        """This record with ``note`` appended to its trail (the oldest dropped past ``MAX_TRAIL``)."""
        return self.model_copy(update={"trail": (*self.trail, note)[-MAX_TRAIL:]})

    def open_interrupts(self) -> list[Interrupt]:
        return [i for i in self.interrupts.values() if i.is_open]

    def held_call_ids(self) -> set[str]:
        """Calls that may not run yet: those under an open ``tool_calls`` interrupt."""
        return {c for i in self.open_interrupts() for c in i.call_ids}


def is_final(status: RunStatus) -> TypeGuard[FinalStatus]:
    """Whether a run with this status is over (its coordinators are closed for good)."""
    return status in FINAL_STATUSES


def read_record(state_or_context: Any) -> RunRecord | None:
    """The run record of an ``AgentState`` or ``ContextSnapshot``, or None before any run."""
    conversation = getattr(state_or_context, "conversation_state", None)
    if conversation is None:
        return None
    raw = conversation.get(RUN_RECORD_KEY)
    return None if raw is None else RunRecord.model_validate(thaw(raw))


def record_transition(record: RunRecord) -> StateTransition:
    """The transition that stores ``record`` (appended to the batch it goes with)."""
    return StateTransition(TransitionType.UPDATE_STATE, {"key": RUN_RECORD_KEY, "value": record.model_dump(mode="json"),
                                                         "scope": "conversation"})


def ask_approval(
    result: CoordinatorResult, question: Any, *, call_ids: tuple[str, ...] | list[str] | None = None, whole_turn: bool = False
) -> CoordinatorResult:
    """``result`` asking for one more approval (call it again for several separate ones).

    ``call_ids`` picks calls requested by ``result`` (give them ids with
    ``TransitionBatch.execute_tool(..., call_id=...)``); None means all of them.
    """
    request = ApprovalRequest(question=question, call_ids=tuple(call_ids) if call_ids is not None else None,
                              whole_turn=whole_turn)
    requests = list(result.metadata.get(_REQUESTS_KEY, ())) + [request.model_dump(mode="json")]
    return CoordinatorResult(
        transitions=result.transitions, reasoning=result.reasoning, confidence=result.confidence,
        metadata={**thaw(result.metadata), _REQUESTS_KEY: requests},
        should_continue=result.should_continue, handoff_to=result.handoff_to,
    )


def approval_requests(result: CoordinatorResult, coordinator: str) -> list[ApprovalRequest]:
    """The approvals ``result`` asks for, checked against the calls it requests."""
    raw = result.metadata.get(_REQUESTS_KEY)
    if not raw:
        return []
    try:
        requests = [ApprovalRequest.model_validate(thaw(r)) for r in raw]
    except Exception as exc:
        raise RunStepError(f"coordinator {coordinator!r} attached a bad approval request: {exc}") from exc
    requested = [t.data["call_id"] for t in result.transitions if t.transition_type == TransitionType.EXECUTE_TOOL]
    for request in requests:
        unknown = sorted(set(request.call_ids or ()) - set(requested))
        if unknown:
            raise RunStepError(
                f"coordinator {coordinator!r} asked approval for tool call(s) {', '.join(unknown)}, which its result does not "
                f"request (it requests: {', '.join(requested) or 'none'})"
            )
        if not request.whole_turn and request.call_ids is None and not requested:
            raise RunStepError(
                f"coordinator {coordinator!r} asked approval for its tool calls but requests none; "
                "use whole_turn=True to approve the turn itself"
            )
    return requests


def answer_batch(run: str, record: RunRecord | None, interrupt_id: str, approve: bool, reason: str | None,
                 version: int) -> TransitionBatch:
    """The batch that records an answer (committed as ``version``), or a refusal.

    Approving a held turn applies its transitions in the same batch; rejecting tool calls
    closes them with an error result naming the reason. Raises ``InterruptNotFound`` /
    ``InterruptAlreadyAnswered`` (nothing to write) otherwise.
    """
    interrupts = record.interrupts if record is not None else {}
    found = interrupts.get(interrupt_id)
    if found is None:
        owner = interrupt_id.rsplit("/", 1)[0] if "/" in interrupt_id else None
        where = f"; it belongs to run {owner!r}" if owner and owner != run and not interrupt_id.startswith(f"{run}/") else ""
        open_ids = ", ".join(i.id for i in (record.open_interrupts() if record else [])) or "none"
        raise InterruptNotFound(f"run {run!r} has no interrupt {interrupt_id!r}{where}; its open interrupts: {open_ids}")
    if not found.is_open:
        raise InterruptAlreadyAnswered(
            f"interrupt {interrupt_id!r} of run {run!r} was already {found.status} at version {found.answered_version}; "
            "answers are final"
        )
    assert record is not None
    answered = found.model_copy(update={"status": "approved" if approve else "rejected", "reason": reason,
                                        "answered_version": version})
    updated = record.model_copy(update={"interrupts": {**record.interrupts, interrupt_id: answered}})
    batch = TransitionBatch()
    if found.kind == "tool_calls" and not approve:
        why = f"rejected by a person: {reason}" if reason else "rejected by a person"
        for call_id in found.call_ids:
            batch.tool_result(call_id, {"error": why, "interrupt": interrupt_id}, is_error=True)
    if found.kind == "turn":
        held = found.held or {}
        if approve:
            batch.extend(StateTransition.model_validate(t) for t in held.get("transitions", ()))
            if held.get("stop"):
                updated = updated.model_copy(update={"next": "", "phase": "turn", "reason": held.get("reasoning")})
            else:
                updated = updated.model_copy(update={"next": held.get("next") or "", "phase": held.get("phase", "turn")})
        else:
            updated = updated.model_copy(update={"next": held.get("on_reject") or "", "phase": "turn"})
    batch.add(record_transition(updated))
    return batch
