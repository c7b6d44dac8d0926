"""`TransitionType` and `StateTransition`: one explicit, validated, immutable state change.

Every transition's `data` is checked for its type when it is created (whether through the
constructor or `model_validate` of a dump), so a malformed one never reaches the reducer.
All problems are reported at once, in one `ValueError` whose message starts with the type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coordinators._frozen import FrozenDict, freeze, json_problems
from coordinators.state import unwrap_validation_error

__all__ = ["TransitionType", "StateTransition"]

SCOPES = ("conversation", "session")


class TransitionType(str, Enum):
    """What a `StateTransition` does; the values are the lower-case names."""

    ADD_MESSAGE = "add_message"
    ADD_MESSAGES = "add_messages"
    UPDATE_STATE = "update_state"
    DELETE_STATE = "delete_state"
    CREATE_SESSION = "create_session"
    CLOSE_SESSION = "close_session"
    EXECUTE_TOOL = "execute_tool"
    TOOL_RESULT = "tool_result"
    UPDATE_CAPABILITY = "update_capability"
    UPDATE_STAGE = "update_stage"

    def __str__(self) -> str:
        return self.value


# -- field checks: each returns the problems found (empty when the value is fine) ------

_Check = Callable[[Any, str], list[str]]


def _describe(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"


def _non_empty_str(value: Any, field: str) -> list[str]:
    if isinstance(value, str) and value:
        return []
    return [f"field '{field}' must be a non-empty string, got {_describe(value)}"]


def _optional_str(value: Any, field: str) -> list[str]:
    if value is None or isinstance(value, str):
        return []
    return [f"field '{field}' must be a string or None, got {_describe(value)}"]


def _any_str(value: Any, field: str) -> list[str]:
    return [] if isinstance(value, str) else [f"field '{field}' must be a string, got {_describe(value)}"]


def _mapping(value: Any, field: str) -> list[str]:
    return [] if isinstance(value, Mapping) else [f"field '{field}' must be a dict, got {_describe(value)}"]


def _bool(value: Any, field: str) -> list[str]:
    return [] if isinstance(value, bool) else [f"field '{field}' must be a bool, got {_describe(value)}"]


def _scope(value: Any, field: str) -> list[str]:
    if isinstance(value, str) and value in SCOPES:
        return []
    return [f"field '{field}' must be 'conversation' or 'session', got {_describe(value)}"]


def _json(value: Any, field: str) -> list[str]:
    return []  # any JSON value; cleanliness is checked for the whole of `data` beforehand


_MESSAGE_FIELDS: dict[str, tuple[_Check, bool]] = {
    "role": (_non_empty_str, True),
    "content": (_any_str, True),
    "name": (_optional_str, False),
    "tool_call_id": (_optional_str, False),
    "metadata": (_mapping, False),
}


def _message(value: Any, field: str) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"field '{field}' must be a message mapping (role, content), got {_describe(value)}"]
    problems = [
        f"missing required field '{field}.{name}'"
        for name, (_, required) in _MESSAGE_FIELDS.items()
        if required and name not in value
    ]
    for name, item in value.items():
        spec = _MESSAGE_FIELDS.get(name)
        if spec is None:
            problems.append(f"unknown field '{field}.{name}' (allowed: {', '.join(_MESSAGE_FIELDS)})")
        else:
            problems += spec[0](item, f"{field}.{name}")
    return problems


def _messages(value: Any, field: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value:
        return [f"field '{field}' must be a non-empty list of messages, got {_describe(value)}"]
    return [problem for index, item in enumerate(value) for problem in _message(item, f"{field}[{index}]")]


@dataclass(frozen=True)
class _Field:
    """How one `data` field is checked; `default` (a factory) fills it in when absent."""

    check: _Check
    required: bool = True
    default: Callable[[], Any] | None = None


def _new_session_id() -> str:
    return uuid4().hex


def _new_call_id() -> str:
    return "call_" + uuid4().hex[:16]


_SCHEMAS: dict[TransitionType, dict[str, _Field]] = {
    TransitionType.ADD_MESSAGE: {"message": _Field(_message)},
    TransitionType.ADD_MESSAGES: {"messages": _Field(_messages)},
    TransitionType.UPDATE_STATE: {
        "key": _Field(_non_empty_str),
        "value": _Field(_json),
        "scope": _Field(_scope, False, lambda: "conversation"),
    },
    TransitionType.DELETE_STATE: {
        "key": _Field(_non_empty_str),
        "scope": _Field(_scope, False, lambda: "conversation"),
    },
    TransitionType.CREATE_SESSION: {
        "session_id": _Field(_non_empty_str, False, _new_session_id),
        "metadata": _Field(_mapping, False),
    },
    TransitionType.CLOSE_SESSION: {"session_id": _Field(_non_empty_str)},
    TransitionType.EXECUTE_TOOL: {
        "tool_name": _Field(_non_empty_str),
        "arguments": _Field(_mapping),
        "call_id": _Field(_non_empty_str, False, _new_call_id),
    },
    TransitionType.TOOL_RESULT: {
        "call_id": _Field(_non_empty_str),
        "output": _Field(_json),
        "is_error": _Field(_bool, False, lambda: False),
    },
    TransitionType.UPDATE_CAPABILITY: {
        "name": _Field(_non_empty_str),
        "value": _Field(_json, False, lambda: True),
    },
    TransitionType.UPDATE_STAGE: {"stage": _Field(_non_empty_str)},
}


def _parse_type(value: Any) -> TransitionType:
    if isinstance(value, TransitionType):
        return value
    try:
        return TransitionType(value)
    except ValueError:
        allowed = ", ".join(member.value for member in TransitionType)
        raise ValueError(f"unknown transition type {_describe(value)} (expected one of: {allowed})") from None


def _plain_messages(kind: TransitionType, data: dict[str, Any]) -> None:
    """Let `add_message(s)` carry `Message` models: replace them by their plain dumps."""
    if kind is TransitionType.ADD_MESSAGE and isinstance(data.get("message"), BaseModel):
        data["message"] = data["message"].model_dump(exclude_defaults=True)
    elif kind is TransitionType.ADD_MESSAGES and isinstance(data.get("messages"), (list, tuple)):
        data["messages"] = [
            item.model_dump(exclude_defaults=True) if isinstance(item, BaseModel) else item
            for item in data["messages"]
        ]


def normalise(kind: Any, data: Any, metadata: Any) -> tuple[TransitionType, FrozenDict, FrozenDict]:
    """Validate one transition's parts and return them frozen, defaults filled in.

    Raises `ValueError` listing every problem, prefixed with the transition type.
    """
    kind = _parse_type(kind)
    if not isinstance(data, Mapping):
        raise ValueError(f"{kind.value}: data must be a dict, got {_describe(data)}")
    if metadata is None:
        metadata = {}
    data = dict(data)
    _plain_messages(kind, data)
    schema = _SCHEMAS[kind]
    problems: list[str] = []
    for name, spec in schema.items():
        if name in data:
            problems += spec.check(data[name], name)
        elif spec.required:
            problems.append(f"missing required field '{name}'")
    unknown = [name for name in data if name not in schema]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        allowed = ", ".join(schema) or "none"
        problems.append(f"unknown field{'s' if len(unknown) > 1 else ''} {names} (allowed: {allowed})")
    problems += json_problems(data, "data")
    if isinstance(metadata, Mapping):
        problems += json_problems(metadata, "metadata")
    else:
        problems.append(f"metadata must be a dict, got {_describe(metadata)}")
    if problems:
        raise ValueError(f"{kind.value}: " + "; ".join(problems))
    for name, spec in schema.items():
        if name not in data and spec.default is not None:
            data[name] = spec.default()
    return kind, FrozenDict(data), freeze(metadata)


class StateTransition(BaseModel):
    """One explicit state change or side-effect request, immutable once created.

    `data` and `metadata` are deep-copied, checked JSON-clean and stored frozen, so no
    caller can change a transition after the fact; `model_dump()` gives plain dicts and
    `model_validate` of a dump rebuilds an equal transition (generated ids included).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    transition_type: TransitionType
    data: FrozenDict = Field(default_factory=FrozenDict)
    metadata: FrozenDict = Field(default_factory=FrozenDict)

    def __init__(
        self,
        transition_type: TransitionType | str,
        data: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            super().__init__(
                transition_type=transition_type,
                data={} if data is None else data,
                metadata={} if metadata is None else metadata,
            )
        except ValidationError as exc:
            raise unwrap_validation_error(exc) from None

    @model_validator(mode="before")
    @classmethod
    def _validate_data(cls, raw: Any) -> Any:
        if not isinstance(raw, Mapping):
            return raw  # an instance, or garbage pydantic itself will reject
        raw = dict(raw)
        if "transition_type" not in raw:
            raise ValueError("missing required field 'transition_type'")
        kind, data, metadata = normalise(raw["transition_type"], raw.get("data", {}), raw.get("metadata"))
        raw.update(transition_type=kind, data=data, metadata=metadata)
        return raw

    @property
    def type(self) -> TransitionType:
        """Shorthand for `transition_type`."""
        return self.transition_type

    def __repr__(self) -> str:
        extra = f", metadata={dict(self.metadata)!r}" if self.metadata else ""
        return f"StateTransition({self.transition_type.value!r}, {dict(self.data)!r}{extra})"
