"""`ContextSnapshot`: the deeply immutable view of an `AgentState` coordinators read.

Unlike the seed's frozen dataclass (whose dicts stay mutable), everything reachable from a
snapshot is frozen: dicts are `FrozenDict`, lists `FrozenList`/tuples, models frozen copies.
It is built from fresh containers, so it shares no mutable object with the live state:
later changes to either side never show on the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import core_schema

from coordinators._frozen import FrozenDict, FrozenList, freeze, thaw
from coordinators.state import AgentState, Message, PendingToolCall, Session

__all__ = ["ContextSnapshot"]

S = TypeVar("S", bound=AgentState)


class _Freeze:
    """Annotation marker: validate as the annotated type, then freeze the result."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return core_schema.no_info_after_validator_function(freeze, handler(source))


_set = object.__setattr__


def _frozen_tuple(items: Iterable[Any]) -> FrozenList:
    """A FrozenList of items that are already immutable (skips per-item `freeze`)."""
    return tuple.__new__(FrozenList, items)


def _copy_record(record: BaseModel) -> Any:
    """A new object equal to a frozen record (Message, Session, PendingToolCall).

    Their fields are atoms and deeply immutable FrozenDicts, so a new top-level object is
    all it takes not to share anything mutable; this is ~3x cheaper than `model_copy()`.
    """
    clone = object.__new__(type(record))
    _set(clone, "__dict__", record.__dict__.copy())
    _set(clone, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    _set(clone, "__pydantic_extra__", None)
    _set(clone, "__pydantic_private__", None)
    return clone


class ContextSnapshot(BaseModel):
    """An immutable view of one `AgentState` at one `version`.

    Has every `AgentState` field (and the fields of `AgentState` subclasses, as frozen
    extras reachable by attribute) plus read helpers. Setting any attribute raises
    `TypeError`; so does mutating anything reachable from it.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    version: int = Field(default=0, ge=0)
    messages: Annotated[tuple[Message, ...], AfterValidator(_frozen_tuple)] = FrozenList()
    session_id: str = ""
    conversation_stage: str = "initial"
    model: str = ""
    provider: str = ""
    max_tokens: int = 4096
    temperature: float = 0.7
    conversation_state: FrozenDict = Field(default_factory=FrozenDict)
    session_state: FrozenDict = Field(default_factory=FrozenDict)
    observed_files: Annotated[tuple[str, ...], AfterValidator(_frozen_tuple)] = FrozenList()
    capabilities: FrozenDict = Field(default_factory=FrozenDict)
    sessions: Annotated[dict[str, Session], _Freeze] = Field(default_factory=FrozenDict)
    pending_tool_calls: Annotated[dict[str, PendingToolCall], _Freeze] = Field(default_factory=FrozenDict)

    @classmethod
    def of(cls, state: AgentState, version: int = 0) -> ContextSnapshot:
        """Snapshot `state` at `version`; nothing mutable is shared with `state`."""
        if not isinstance(state, AgentState):
            raise TypeError(f"ContextSnapshot.of expects an AgentState, got {type(state).__name__}")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative int, got {version!r}")
        values: dict[str, Any] = {
            "version": version,
            "messages": _frozen_tuple(_copy_record(m) for m in state.messages),
            "session_id": state.session_id,
            "conversation_stage": state.conversation_stage,
            "model": state.model,
            "provider": state.provider,
            "max_tokens": state.max_tokens,
            "temperature": state.temperature,
            "conversation_state": FrozenDict(state.conversation_state),
            "session_state": FrozenDict(state.session_state),
            "observed_files": _frozen_tuple(state.observed_files),
            "capabilities": FrozenDict(state.capabilities),
            "sessions": FrozenDict({k: _copy_record(s) for k, s in state.sessions.items()}),
            "pending_tool_calls": FrozenDict({k: _copy_record(p) for k, p in state.pending_tool_calls.items()}),
        }
        for name in type(state).model_fields.keys() - AgentState.model_fields.keys():
            if hasattr(cls, name):
                raise TypeError(
                    f"{type(state).__name__}.{name} clashes with ContextSnapshot.{name}; rename the field"
                )
            values[name] = freeze(getattr(state, name))
        return cls.model_construct(_fields_set=set(values), **values)

    @model_validator(mode="after")
    def _freeze_extras(self) -> ContextSnapshot:
        # Direct construction (e.g. in tests) may pass extra fields: freeze them too.
        extra = self.__pydantic_extra__
        if extra:
            for name, value in extra.items():
                extra[name] = freeze(value)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"ContextSnapshot is immutable (cannot set {name!r}); return transitions instead")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"ContextSnapshot is immutable (cannot delete {name!r})")

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """As pydantic's, minus serializer warnings about frozen containers in extra fields."""
        kwargs.setdefault("warnings", False)
        return super().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        """As pydantic's, minus serializer warnings about frozen containers in extra fields."""
        kwargs.setdefault("warnings", False)
        return super().model_dump_json(**kwargs)

    # -- helpers ---------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Number of messages."""
        return len(self.messages)

    @property
    def last_message(self) -> Message | None:
        """The newest message, or None when there is none."""
        return self.messages[-1] if self.messages else None

    @property
    def is_complete(self) -> bool:
        """True when the conversation stage is ``"complete"``."""
        return self.conversation_stage == "complete"

    def get_state(self, key: str, default: Any = None) -> Any:
        """Look `key` up in the conversation state, then the session state."""
        if key in self.conversation_state:
            return self.conversation_state[key]
        return self.session_state.get(key, default)

    def has_capability(self, name: str) -> bool:
        """True when capability `name` is set to a truthy value."""
        return bool(self.capabilities.get(name))

    def get_capability_value(self, name: str, default: Any = None) -> Any:
        """The value of capability `name`, or `default`."""
        return self.capabilities.get(name, default)

    def extra_fields(self) -> Mapping[str, Any]:
        """The frozen values of fields an `AgentState` subclass added."""
        return FrozenDict(self.__pydantic_extra__ or {})

    def to_state(self, state_type: type[S] = AgentState) -> S:  # type: ignore[assignment]  # S is AgentState when not given
        """A fresh, mutable state of `state_type` with this snapshot's content."""
        fields = {name: thaw(getattr(self, name)) for name in AgentState.model_fields}
        for name, value in (self.__pydantic_extra__ or {}).items():
            if name in state_type.model_fields:
                fields[name] = thaw(value)
        return state_type.model_validate(fields)

