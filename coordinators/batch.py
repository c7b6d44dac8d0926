"""`TransitionBatch`: the builder coordinators use to assemble transitions.

Builder methods append in place and return the batch itself, so both the chained style
(`batch.update_state(...).execute_tool(...)`) and one call per line work. The transitions
inside are immutable; a *sealed* batch (the copy a `CoordinatorResult` keeps) refuses every
builder method, so nobody can change a result after it was returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import core_schema

from coordinators._frozen import check_json_clean, freeze, thaw
from coordinators.transitions import StateTransition, TransitionType

__all__ = ["TransitionBatch"]

_T = TransitionType


class TransitionBatch:
    """An ordered list of `StateTransition`s plus free-form JSON `metadata`.

    Equality is by transitions and metadata. It pickles, and it can be a field of a
    pydantic model (dumped as ``{"transitions": [...], "metadata": {...}}``).
    """

    # _items: the transitions, in order (only appended to, and only while not sealed).
    # _metadata: a plain dict while editable, a FrozenDict once sealed.
    # _sealed: True forever once set; every builder method then raises TypeError.
    __slots__ = ("_items", "_metadata", "_sealed")

    def __init__(
        self,
        transitions: Iterable[StateTransition | Mapping[str, Any]] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._items: list[StateTransition] = [_as_transition(t) for t in transitions or ()]
        self._metadata: dict[str, Any] = _plain_metadata(metadata)
        self._sealed = False

    # -- reading ---------------------------------------------------------------------

    @property
    def transitions(self) -> tuple[StateTransition, ...]:
        """A snapshot of the transitions, in order."""
        return tuple(self._items)

    @property
    def metadata(self) -> dict[str, Any]:
        """The batch's metadata: editable unless the batch is sealed (then a FrozenDict)."""
        return self._metadata

    @property
    def sealed(self) -> bool:
        """Whether builder methods are refused."""
        return self._sealed

    def is_empty(self) -> bool:
        """True when the batch holds no transition."""
        return not self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[StateTransition]:
        return iter(tuple(self._items))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransitionBatch):
            return NotImplemented
        return self._items == other._items and self._metadata == other._metadata

    def __hash__(self) -> int:
        if not self._sealed:
            raise TypeError("unhashable: an editable TransitionBatch (seal it with .copy(sealed=True))")
        return hash((tuple(self._items), self._metadata))

    def __repr__(self) -> str:
        sealed = ", sealed" if self._sealed else ""
        return f"TransitionBatch({list(self._items)!r}, metadata={dict(self._metadata)!r}{sealed})"

    def __getstate__(self) -> dict[str, Any]:
        return {"items": self._items, "metadata": dict(self._metadata), "sealed": self._sealed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._items = list(state["items"])
        self._sealed = state["sealed"]
        self._metadata = freeze(state["metadata"]) if self._sealed else dict(state["metadata"])

    def copy(self, sealed: bool = False) -> TransitionBatch:
        """Return an independent copy; `sealed=True` makes the copy refuse any change."""
        clone = TransitionBatch(self._items, self._metadata)
        if sealed:
            clone._metadata = freeze(clone._metadata)
            clone._sealed = True
        return clone

    # -- building --------------------------------------------------------------------

    def add(self, transition: StateTransition) -> TransitionBatch:
        """Append one transition."""
        self._check_editable()
        if not isinstance(transition, StateTransition):
            raise TypeError(f"TransitionBatch.add expects a StateTransition, got {type(transition).__name__}")
        self._items.append(transition)
        return self

    def extend(self, transitions: TransitionBatch | Iterable[StateTransition]) -> TransitionBatch:
        """Append every transition of another batch or iterable (all or none).

        Only the transitions are taken: another batch's metadata is not merged.
        """
        self._check_editable()
        items = list(transitions)
        for index, item in enumerate(items):
            if not isinstance(item, StateTransition):
                raise TypeError(f"TransitionBatch.extend: item {index} is a {type(item).__name__}, not a StateTransition")
        self._items.extend(items)
        return self

    def add_message(self, message: BaseModel | Mapping[str, Any]) -> TransitionBatch:
        """Append a message (a `Message` or a mapping with `role` and `content`)."""
        return self._append(_T.ADD_MESSAGE, message=message)

    def add_messages(self, messages: Iterable[BaseModel | Mapping[str, Any]]) -> TransitionBatch:
        """Append several messages as one transition."""
        return self._append(_T.ADD_MESSAGES, messages=list(messages))

    def update_state(self, key: str, value: Any, scope: str = "conversation") -> TransitionBatch:
        """Set `key` to `value` in the conversation or session state."""
        return self._append(_T.UPDATE_STATE, key=key, value=value, scope=scope)

    def delete_state(self, key: str, scope: str = "conversation") -> TransitionBatch:
        """Remove `key` from the conversation or session state."""
        return self._append(_T.DELETE_STATE, key=key, scope=scope)

    def execute_tool(self, tool_name: str, arguments: Mapping[str, Any], call_id: str | None = None) -> TransitionBatch:
        """Request a tool call; `call_id` is generated when not given."""
        data: dict[str, Any] = {"tool_name": tool_name, "arguments": arguments}
        if call_id is not None:
            data["call_id"] = call_id
        return self._append(_T.EXECUTE_TOOL, **data)

    def tool_result(self, call_id: str, output: Any, is_error: bool = False) -> TransitionBatch:
        """Answer a pending tool call with its output."""
        return self._append(_T.TOOL_RESULT, call_id=call_id, output=output, is_error=is_error)

    def update_capability(self, name: str, value: Any = True) -> TransitionBatch:
        """Set a capability flag (or value)."""
        return self._append(_T.UPDATE_CAPABILITY, name=name, value=value)

    def update_stage(self, stage: str) -> TransitionBatch:
        """Move the conversation to `stage`."""
        return self._append(_T.UPDATE_STAGE, stage=stage)

    def create_session(self, session_id: str | None = None, metadata: Mapping[str, Any] | None = None) -> TransitionBatch:
        """Open a session (id generated when not given) and make it current."""
        data: dict[str, Any] = {}
        if session_id is not None:
            data["session_id"] = session_id
        if metadata is not None:
            data["metadata"] = metadata
        return self._append(_T.CREATE_SESSION, **data)

    def close_session(self, session_id: str) -> TransitionBatch:
        """Close an open session."""
        return self._append(_T.CLOSE_SESSION, session_id=session_id)

    def _append(self, kind: TransitionType, **data: Any) -> TransitionBatch:
        self._check_editable()
        self._items.append(StateTransition(kind, data))
        return self

    def _check_editable(self) -> None:
        if self._sealed:
            raise TypeError(
                "this TransitionBatch is sealed (it belongs to a CoordinatorResult or was copied "
                "with sealed=True); use .copy() for an editable batch"
            )

    # -- serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form: ``{"transitions": [...], "metadata": {...}}``."""
        return {
            "transitions": [t.model_dump(mode="json") for t in self._items],
            "metadata": thaw(self._metadata),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TransitionBatch:
        """Rebuild a batch from `to_dict()` output (transitions are validated again)."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"TransitionBatch.from_dict expects a dict, got {type(raw).__name__}")
        unknown = sorted(set(raw) - {"transitions", "metadata"})
        if unknown:
            raise ValueError(f"TransitionBatch.from_dict: unknown field(s) {unknown} (allowed: transitions, metadata)")
        return cls(raw.get("transitions") or (), raw.get("metadata"))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        """Accept a batch, a dict or a list of transitions; dump with `to_dict`."""
        return core_schema.no_info_plain_validator_function(
            cls._coerce,
            json_schema_input_schema=core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(cls.to_dict),
        )

    @classmethod
    def _coerce(cls, value: Any) -> TransitionBatch:
        if isinstance(value, TransitionBatch):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        if isinstance(value, (list, tuple)):
            return cls(value)
        raise ValueError(f"expected a TransitionBatch, a dict or a list of transitions, got {type(value).__name__}")


def _as_transition(item: StateTransition | Mapping[str, Any]) -> StateTransition:
    if isinstance(item, StateTransition):
        return item
    if isinstance(item, Mapping):
        return StateTransition.model_validate(item)
    raise TypeError(f"a TransitionBatch holds StateTransitions, got {type(item).__name__}")


def _plain_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"TransitionBatch metadata must be a dict, got {type(metadata).__name__}")
    check_json_clean(metadata, "metadata")
    return thaw(metadata)
