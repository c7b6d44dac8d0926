"""The agent state a run's orchestrator owns, and the frozen records inside it.

`AgentState` is deliberately mutable (the orchestrator's `apply(fn)` edits a working copy);
`Message`, `Session` and `PendingToolCall` are deeply immutable so the reducer can share
them between successive states instead of copying them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator, model_validator
from pydantic_core.core_schema import ValidationInfo

from coordinators._frozen import FrozenDict
from coordinators._shared import SHARED_RECORDS_KEY, SharedRecords

__all__ = ["Message", "Session", "PendingToolCall", "AgentState", "unwrap_validation_error", "shared_records"]


def unwrap_validation_error(exc: ValidationError) -> Exception:
    """Return the error a custom `__init__` should raise for `exc`.

    When pydantic wrapped exactly one `ValueError` of ours, give back that error so the
    caller sees our message alone; otherwise keep pydantic's (also a `ValueError`).
    """
    errors = exc.errors()
    if len(errors) == 1:
        original = (errors[0].get("ctx") or {}).get("error")
        if isinstance(original, Exception):
            return original
    return exc


def _non_empty(value: str, what: str) -> str:
    if value == "":
        raise ValueError(f"{what} must be a non-empty string")
    return value


class _Record(BaseModel):
    """A deeply immutable record: shared, never copied, between successive states (see
    `coordinators._shared`). Subclasses of the records below are copied as usual."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    if TYPE_CHECKING:  # the records' own __init__ pass their fields on by keyword
        def __init__(self, /, **data: Any) -> None: ...

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        return self if type(self) in _SHARED_KINDS else super().__deepcopy__(memo)

    @model_validator(mode="wrap")
    @classmethod
    def _reuse_shared(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        shared = info.context.get(SHARED_RECORDS_KEY) if info.context else None
        if shared is not None and cls in _SHARED_KINDS:
            record = shared.take(cls, value)
            if record is not None:
                return record
        return handler(value)


class Message(_Record):
    """One conversation message; frozen, `metadata` included, so it can be shared freely."""

    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    metadata: FrozenDict = Field(default_factory=FrozenDict)

    def __init__(
        self,
        role: str,
        content: str,
        name: str | None = None,
        tool_call_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            super().__init__(
                role=role,
                content=content,
                name=name,
                tool_call_id=tool_call_id,
                metadata=FrozenDict() if metadata is None else metadata,
            )
        except ValidationError as exc:
            raise unwrap_validation_error(exc) from None

    @field_validator("role")
    @classmethod
    def _role_not_empty(cls, value: str) -> str:
        return _non_empty(value, "Message.role")

    def __reduce__(self) -> str | tuple[Any, ...]:
        # Compact and fast: snapshots ship thousands of messages across Ray.
        if type(self) is not Message:
            return super().__reduce__()
        d = self.__dict__
        return (_rebuild_message, (d["role"], d["content"], d["name"], d["tool_call_id"], d["metadata"] or None))


def _rebuild_message(
    role: str, content: str, name: str | None, tool_call_id: str | None, metadata: FrozenDict | None
) -> Message:
    """Unpickle a `Message` without re-validation (it was valid when pickled)."""
    message = object.__new__(Message)
    fields: dict[str, Any] = {"role": role, "content": content, "name": name, "tool_call_id": tool_call_id}
    fields["metadata"] = _EMPTY if metadata is None else metadata
    _set(message, "__dict__", fields)
    _set(message, "__pydantic_fields_set__", {"role", "content"})
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message


_set = object.__setattr__
_EMPTY = FrozenDict()


class Session(_Record):
    """An open session, by id; `create_session` adds one and `close_session` removes it."""

    session_id: str
    metadata: FrozenDict = Field(default_factory=FrozenDict)

    def __init__(self, session_id: str, metadata: Mapping[str, Any] | None = None) -> None:
        try:
            super().__init__(session_id=session_id, metadata=FrozenDict() if metadata is None else metadata)
        except ValidationError as exc:
            raise unwrap_validation_error(exc) from None

    @field_validator("session_id")
    @classmethod
    def _id_not_empty(cls, value: str) -> str:
        return _non_empty(value, "Session.session_id")


class PendingToolCall(_Record):
    """A tool call requested by `execute_tool` and not yet answered by `tool_result`."""

    call_id: str
    tool_name: str
    arguments: FrozenDict = Field(default_factory=FrozenDict)

    def __init__(self, call_id: str, tool_name: str, arguments: Mapping[str, Any] | None = None) -> None:
        try:
            super().__init__(
                call_id=call_id, tool_name=tool_name, arguments=FrozenDict() if arguments is None else arguments
            )
        except ValidationError as exc:
            raise unwrap_validation_error(exc) from None

    @field_validator("call_id", "tool_name")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        return _non_empty(value, "PendingToolCall field")


_SHARED_KINDS: tuple[type[BaseModel], ...] = (Message, Session, PendingToolCall)


def shared_records(state: BaseModel) -> SharedRecords:
    """The deeply immutable records inside ``state`` (a state of any type), for validating
    the next state from ``state``'s JSON without building them again: pass
    ``shared_records(state).context()`` as ``model_validate_json``'s ``context``."""
    return SharedRecords.collect(state, _SHARED_KINDS)


class AgentState(BaseModel):
    """The state one run's orchestrator owns and `reduce` evolves.

    Mutable on purpose; subclass it to add typed fields (`reduce` and `ContextSnapshot`
    carry them along). `sessions` holds the open sessions and `session_id` the current one
    ("" when none); `pending_tool_calls` holds requested calls awaiting their result.
    """

    messages: list[Message] = Field(default_factory=list)
    session_id: str = ""
    conversation_stage: str = "initial"
    model: str = ""
    provider: str = ""
    max_tokens: int = 4096
    temperature: float = 0.7
    conversation_state: dict[str, Any] = Field(default_factory=dict)
    session_state: dict[str, Any] = Field(default_factory=dict)
    observed_files: list[str] = Field(default_factory=list)
    capabilities: dict[str, Any] = Field(default_factory=dict)
    sessions: dict[str, Session] = Field(default_factory=dict)
    pending_tool_calls: dict[str, PendingToolCall] = Field(default_factory=dict)
