"""Sharing the deeply immutable records of a state with the next state, instead of copying them.

`Message`, `Session` and `PendingToolCall` are frozen all the way down. The orchestrator's
``apply(fn)`` runs ``fn`` on a deep copy of the state and validates the result again from
its JSON text, which would build every record twice: a write to a state of 100,000
messages held three full copies at its peak. Instead:
  - a deep copy returns these records as they are (they declare ``__deepcopy__``), so the
    working copy costs its containers only;
  - `SharedRecords.collect(state)` lists the records of a state in the order its JSON dump
    writes them, and the records' validator, given ``SharedRecords.context()``, returns the
    listed instance for a JSON object equal to that instance's fields, rather than building
    an equal new one. Anything else (a changed record, a subclass, a record reached through
    an untyped field) is validated as usual: sharing never changes what validation decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

__all__ = ["SharedRecords", "SHARED_RECORDS_KEY"]

SHARED_RECORDS_KEY = "soloist.shared_records"
"""The validation-context key under which `SharedRecords.context()` puts itself."""

# How many listed records a JSON object may skip to find its own: records reached through
# an untyped field are dumped but validated as plain data, so they never ask for theirs.
_LOOKAHEAD = 2


class SharedRecords:
    """The shareable records of one state, in dump order, handed back to its validation once."""

    def __init__(self, records: list[BaseModel]) -> None:
        self._records = records
        self._next = 0
        self.reused = 0

    @classmethod
    def collect(cls, state: BaseModel, kinds: tuple[type[BaseModel], ...]) -> SharedRecords:
        """The instances of ``kinds`` (exactly those types) inside ``state``, in dump order."""
        return cls(list(_walk(state, kinds)))

    def context(self) -> dict[str, Any]:
        """The validation context that lets the records' validator reuse these instances."""
        return {SHARED_RECORDS_KEY: self}

    def take(self, kind: type[BaseModel], value: Any) -> BaseModel | None:
        """The listed instance that ``value`` (a JSON object being validated as ``kind``) was
        dumped from, if its fields equal ``value``; None to validate ``value`` as usual."""
        if not isinstance(value, dict):
            return None
        records = self._records
        for i in range(self._next, min(self._next + _LOOKAHEAD + 1, len(records))):
            record = records[i]
            if type(record) is kind and record.__dict__ == value:
                self._next = i + 1
                self.reused += 1
                return record
        self._next += 1  # this object's own record changed on the way through JSON: go on after it
        return None


def _walk(value: Any, kinds: tuple[type[BaseModel], ...]) -> Iterator[BaseModel]:
    if type(value) in kinds:
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _walk(value.__dict__.get(name), kinds)
        for extra in (value.__pydantic_extra__ or {}).values():
            yield from _walk(extra, kinds)
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            if type(item) in kinds:  # the common case, a list of messages: no nested generator
                yield item
            elif isinstance(item, (BaseModel, list, tuple, dict)):
                yield from _walk(item, kinds)
