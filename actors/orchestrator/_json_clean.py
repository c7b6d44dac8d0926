"""JSON-clean round trips of state models, refusing what JSON would silently change.

pydantic serialises ``nan`` and ``±inf`` as ``null`` by default, so a plain
``model_validate_json(model_dump_json())`` turns a non-finite float in an ``Any`` or
``float | None`` field into ``None``: the write would commit a value nobody wrote (and the
journal, a checkpoint and a snapshot would disagree with what ``fn`` produced). This module
does the same round trip but refuses non-finite floats, naming where they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from actors.exceptions import NotJsonClean

__all__ = [ "json_round_trip"]

M = TypeVar("M", bound=BaseModel)


_ATOMS = (str, int, bool, type(None))


def _non_finite_path(value: Any, path: str) -> str | None:
    """Where the first ``nan``/``inf`` under ``value`` is (walking models, mappings and sequences), or None."""
    kind = type(value)
    if kind in _ATOMS:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"{path} = {value!r}"
    if isinstance(value, BaseModel):
        items: Any = value.__dict__.items()
    elif isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = enumerate(value)
    elif isinstance(value, float):  # a float subclass
        return None if math.isfinite(value) else f"{path} = {value!r}"
    else:
        return None
    for key, item in items:
        found = _non_finite_path(item, f"{path}.{key}" if isinstance(value, BaseModel) else f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def json_round_trip(model: M) -> M:
    """``model`` validated again from its JSON form; ``NotJsonClean`` if JSON would change it.

    Serialisation errors (values no serializer knows, invalid UTF-8 bytes) and validation
    errors propagate unchanged.
    """
    where = _non_finite_path(model, type(model).__name__)
    if where is not None:
        raise NotJsonClean(
            f"{where} is not JSON-clean: JSON has no nan or infinity (pydantic would store it as null); "
            "use None or a finite number"
        )
    return type(model).model_validate_json(model.model_dump_json())
