"""Deeply immutable values: `freeze`, `thaw`, and the JSON-cleanliness check.

Snapshots and transitions cross Ray and are read by coordinators that must not be able to
change what they read. `freeze` turns plain dicts and lists into `FrozenDict` and
`FrozenList` (subclasses of `dict` and `tuple`, so `json.dumps`, pydantic and `==` against
plain values keep working) and `thaw` turns them back into fresh plain containers.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from pydantic import BaseModel
from pydantic_core import core_schema

__all__ = ["FrozenDict", "FrozenList", "freeze", "thaw", "check_json_clean", "json_problems"]

# Values that are immutable atoms: freeze/thaw return them as they are.
_ATOMS: frozenset[type] = frozenset({type(None), bool, int, float, complex, str, bytes})

_JSON_ALLOWED = "allowed: None, bool, int, float, str, dict with str keys, list"


def _immutable(self: object, *_: Any, **__: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable")


class FrozenDict(dict[str, Any]):
    """A read-only, hashable `dict` whose values are frozen too.

    Subclassing `dict` (rather than only `Mapping`) keeps it JSON-serialisable and equal to
    a plain dict with the same items. Every mutating method raises `TypeError`.
    """

    # _hash: cached hash of the items, or None until first asked (set once, never changed).
    __slots__ = ("_hash",)
    _hash: int | None

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /) -> None:
        source = items.items() if isinstance(items, Mapping) else items
        dict.__init__(self, ((key, freeze(value)) for key, value in source))
        object.__setattr__(self, "_hash", None)

    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = __ior__ = _immutable
    __setattr__ = __delattr__ = _immutable

    @classmethod
    def fromkeys(cls, keys: Iterable[str], value: Any = None) -> FrozenDict:  # type: ignore[override]  # dict.fromkeys is generic in its keys; these are str
        """Build a FrozenDict with every key mapped to (a frozen) `value`."""
        return cls({key: value for key in keys})

    def __hash__(self) -> int:  # type: ignore[override]  # dict's __hash__ is None; a frozen dict is hashable
        cached = self._hash
        if cached is None:
            cached = hash(frozenset(self.items()))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_frozen_dict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self  # deeply immutable: like a tuple of atoms, a deep copy is itself

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        """Validate from any str-keyed mapping (frozen on the way in), dump as plain dicts."""
        from_json = core_schema.no_info_after_validator_function(
            freeze, core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
        )
        return core_schema.json_or_python_schema(
            json_schema=from_json,
            python_schema=core_schema.no_info_plain_validator_function(_coerce_frozen_dict),
            serialization=core_schema.plain_serializer_function_ser_schema(thaw),
        )


def _rebuild_frozen_dict(items: dict[str, Any]) -> FrozenDict:
    """Unpickle without re-freezing: the pickled values were frozen and unpickle frozen."""
    rebuilt = dict.__new__(FrozenDict)
    dict.update(rebuilt, items)
    object.__setattr__(rebuilt, "_hash", None)
    return rebuilt


def _coerce_frozen_dict(value: Any) -> FrozenDict:
    if isinstance(value, FrozenDict):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping, got {type(value).__name__}")
    bad = [key for key in value if not isinstance(key, str)]
    if bad:
        raise ValueError(f"mapping keys must be strings, got {bad[0]!r}")
    return FrozenDict(value)


class FrozenList(tuple[Any, ...]):
    """An immutable sequence of frozen values: a `tuple` that also equals an equal `list`.

    The list mutators exist only to raise `TypeError`, so that `frozen.append(x)` fails
    with the same error type as `frozen[0] = x`.
    """

    __slots__ = ()

    def __new__(cls, items: Iterable[Any] = ()) -> FrozenList:
        return super().__new__(cls, (freeze(item) for item in items))

    append = extend = insert = remove = pop = clear = sort = reverse = _immutable
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = tuple.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_frozen_list, (tuple(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self

    def __repr__(self) -> str:
        return f"FrozenList({list(self)!r})"


def _rebuild_frozen_list(items: tuple[Any, ...]) -> FrozenList:
    """Unpickle without re-freezing: the pickled items were frozen and unpickle frozen."""
    return tuple.__new__(FrozenList, items)


def freeze(value: Any) -> Any:
    """Return a deeply immutable equivalent of `value`.

    Mappings become `FrozenDict`, lists and tuples `FrozenList`, sets `frozenset`, pydantic
    models frozen copies (see `_freeze_model`); atoms and already-frozen values are returned
    as they are, anything else is deep-copied so that nothing mutable is shared.
    """
    kind = type(value)
    if kind in _ATOMS or kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, Mapping):
        return FrozenDict(value)
    if isinstance(value, (list, tuple)):
        return FrozenList(value)
    if isinstance(value, (set, frozenset)):
        return frozenset(freeze(item) for item in value)
    if isinstance(value, BaseModel):
        return _freeze_model(value)
    return copy.deepcopy(value)


def thaw(value: Any) -> Any:
    """Return a fresh plain equivalent of `value`: dicts, lists and model dumps.

    The inverse of `freeze` for JSON-like data; the result shares no container with `value`.
    """
    kind = type(value)
    if kind in _ATOMS:
        return value
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return {thaw(item) for item in value}
    if isinstance(value, BaseModel):
        # By field, not model_dump(): frozen copies hold FrozenLists where lists are declared.
        fields = {name: thaw(item) for name, item in value.__dict__.items()}
        fields.update({name: thaw(item) for name, item in (value.__pydantic_extra__ or {}).items()})
        return fields
    return copy.deepcopy(value)


def json_problems(value: Any, where: str) -> list[str]:
    """List every non-JSON part of `value`, each as ``"<path>: <what is wrong>"``."""
    problems: list[str] = []
    _collect(value, where, problems, set())
    return problems


def check_json_clean(value: Any, where: str) -> None:
    """Raise `ValueError` naming every path in `value` that is not plain JSON.

    Allowed: None, bool, int, finite float, str, dicts with str keys, lists and tuples.
    `where` is the path of `value` itself, e.g. ``"data"`` gives ``"data.arguments.x"``.
    """
    problems = json_problems(value, where)
    if problems:
        raise ValueError("; ".join(problems))


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as JSON text (an unpaired surrogate: no UTF-8 encodes it),
    or None. ASCII, the common case, is checked without encoding."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds an unpaired surrogate {text[exc.start]!r} at index {exc.start} (not valid Unicode text, so not JSON-clean)"
    return None


def _collect(value: Any, where: str, problems: list[str], path_ids: set[int]) -> None:
    if isinstance(value, str):
        problem = _text_problem(value)
        if problem is not None:
            problems.append(f"{where}: string {problem}")
        return
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{where}: float {value!r} is not JSON-clean (must be finite)")
        return
    if isinstance(value, (Mapping, list, tuple)):
        if id(value) in path_ids:
            problems.append(f"{where}: contains itself (a cycle is not JSON-clean)")
            return
        path_ids.add(id(value))
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(f"{where}: key {key!r} is not a string (JSON keys must be str)")
                    continue
                problem = _text_problem(key)
                if problem is not None:
                    problems.append(f"{where}: key {key!r} {problem}")
                    continue
                _collect(item, f"{where}.{key}", problems, path_ids)
        else:
            for index, item in enumerate(value):
                _collect(item, f"{where}[{index}]", problems, path_ids)
        path_ids.discard(id(value))
        return
    problems.append(f"{where}: {type(value).__name__} is not JSON-clean ({_JSON_ALLOWED})")


# -- pydantic models -------------------------------------------------------------------

# Frozen stand-in class for each mutable model class frozen so far.
_FROZEN_MODEL_CLASSES: dict[type[BaseModel], type[BaseModel]] = {}


def _freeze_model(model: BaseModel) -> BaseModel:
    """Copy `model` with every field frozen, as an instance of a frozen subclass if needed.

    A model whose class is already frozen and whose fields are all frozen is returned as is.
    """
    values = {name: freeze(item) for name, item in model.__dict__.items()}
    cls = type(model)
    if cls.model_config.get("frozen"):
        if all(values[name] is item for name, item in model.__dict__.items()):
            return model
        return cls.model_construct(_fields_set=set(model.model_fields_set), **values)
    return _frozen_class(cls).model_construct(_fields_set=set(model.model_fields_set), **values)


def _frozen_class(cls: type[BaseModel]) -> type[BaseModel]:
    frozen = _FROZEN_MODEL_CLASSES.get(cls)
    if frozen is None:
        namespace = {
            "__module__": cls.__module__,
            "__qualname__": f"Frozen{cls.__qualname__}",
            "model_config": {**cls.model_config, "frozen": True},
            "__reduce__": _reduce_frozen_model,
        }
        frozen = type(f"Frozen{cls.__name__}", (cls,), namespace)
        _FROZEN_MODEL_CLASSES[cls] = frozen
    return frozen


def _reduce_frozen_model(self: BaseModel) -> tuple[Any, ...]:
    # The frozen class is made at run time, so pickle the original class and rebuild it.
    original = type(self).__mro__[1]
    return (_rebuild_frozen_model, (original, dict(self.__dict__), set(self.model_fields_set)))


def _rebuild_frozen_model(cls: type[BaseModel], values: dict[str, Any], fields_set: set[str]) -> BaseModel:
    return _frozen_class(cls).model_construct(_fields_set=fields_set, **values)

