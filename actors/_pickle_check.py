"""Say, in one sentence, why an object that must travel to the cluster cannot be pickled.

Ray pickles a run's initial state, its caller and every skill to ship them to actors. When
that fails, Ray's error is a dump about ``_thread.lock``; this module finds *which* object
holds the unpicklable value and words the fix: define the thing at module level, or do not
capture the value. It runs only after a failure, so it costs nothing on the normal path.

The usual culprits, checked in this order: a class defined inside a function (pydantic keeps
the defining function's namespace, so every local of that function travels with the model);
a function's closure cells and the globals it uses; a model's field values; an object's
attributes; items of lists, tuples, sets and dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle

__all__ = ["check_picklable", "explain_unpicklable", "pickling_problem"]

_MAX_DEPTH = 4


def pickling_problem(value: Any) -> str | None:
    """None when ``value`` pickles (as Ray would, with cloudpickle); else the error, shortly."""
    try:
        cloudpickle.dumps(value)
    except Exception as exc:  # anything pickling raises is the answer, not a crash
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return None


def _kind(value: Any) -> str:
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    name = getattr(value, "__qualname__", None)
    if callable(value) and name:
        return f"function {name}"
    named = f"{type(value).__module__}.{type(value).__qualname__}"
    return "a threading.Lock" if named == "_thread.lock" else f"a {named.removeprefix('builtins.')} object"


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def _defining_function(qualname: str) -> str | None:
    """``make.<locals>.State`` -> ``make``."""
    head, sep, _ = qualname.partition(".<locals>.")
    return head.rsplit(".", 1)[-1] if sep else None


def _unwrap(value: Any) -> Any:
    """pydantic keeps a parent namespace's values behind weak references; see through them."""
    if type(value).__name__ == "_PydanticWeakRef" and callable(value):
        return value()
    return value


Culprit = tuple[str, str | None]  # (what cannot be pickled, the fix when it is specific)


def _culprit(value: Any, path: str, depth: int, seen: set[int]) -> Culprit | None:
    """What inside ``value`` does not pickle, as words, and the fix that fits it."""
    if id(value) in seen or depth > _MAX_DEPTH:
        return None
    seen.add(id(value))
    if isinstance(value, type):
        owner = _defining_function(value.__qualname__)
        namespace = dict(getattr(value, "__pydantic_parent_namespace__", None) or {})
        for name, item in namespace.items():
            item = _unwrap(item)
            if pickling_problem(item) is not None:
                return (
                    f"class {_short(value.__qualname__)} is defined inside {owner or 'a function'}(), and pydantic "
                    f"keeps that function's local {name!r} ({_kind(item)}) with the class",
                    f"define {_short(value.__qualname__)} at module level, or don't keep {name!r} as a local of "
                    f"{owner or 'that function'}()",
                )
        for attribute in vars(value).values():
            function = getattr(attribute, "__func__", attribute)
            if callable(function) and hasattr(function, "__code__") and pickling_problem(function) is not None:
                found = _culprit(function, path, depth + 1, seen)
                if found is not None:
                    return found
        return None
    if callable(value) and hasattr(value, "__code__"):
        code = value.__code__
        short = _short(value.__qualname__)
        for name, cell in zip(code.co_freevars, value.__closure__ or ()):
            try:
                item = cell.cell_contents
            except ValueError:
                continue
            if pickling_problem(item) is not None:
                return (f"function {short} captures {name!r} ({_kind(item)})",
                        f"don't capture {name!r} in {short} (create it inside the function), or define {short} "
                        "at module level without it")
        globals_ = getattr(value, "__globals__", {})
        if getattr(value, "__module__", None) == "__main__":  # pickled by value, with the globals it uses
            for name in code.co_names:
                if name in globals_ and pickling_problem(globals_[name]) is not None:
                    return (f"function {short} uses the global {name!r} ({_kind(globals_[name])}) of a script",
                            f"move {short} into an importable module, or don't use {name!r} in it")
        return None
    children: list[tuple[str, Any]] = []
    if not isinstance(value, (list, tuple, set, frozenset, dict)):
        children.append(("", type(value)))
    fields = getattr(type(value), "model_fields", None)
    attrs = getattr(value, "__dict__", None)
    if fields is not None:
        children += [(f"{path}.{name}", getattr(value, name, None)) for name in fields]
    elif isinstance(attrs, dict):
        children += [(f"{path}.{name}", item) for name, item in attrs.items()]
    if isinstance(value, dict):
        children += [(f"{path}[{key!r}]", item) for key, item in list(value.items())[:200]]
    elif isinstance(value, (list, tuple, set, frozenset)):
        children += [(f"{path}[{i}]", item) for i, item in enumerate(list(value)[:200])]
    for child_path, child in children:
        if pickling_problem(child) is None:
            continue
        deeper = _culprit(child, child_path or path, depth + 1, seen)
        if deeper is not None:
            return deeper
        if child_path:
            return f"{child_path} ({_kind(child)})", None
    return None


def explain_unpicklable(value: Any, role: str) -> str | None:
    """One sentence naming what in ``value`` (``role``, e.g. "the initial state") cannot be
    pickled and how to fix it; None when ``value`` pickles after all."""
    problem = pickling_problem(value)
    if problem is None:
        return None
    found = _culprit(value, role, 0, set())
    what, fix = found if found is not None else (f"{role} ({_kind(value)})", None)
    if fix is None:
        fix = "keep locks, open files, sockets and clients out of it (create them where they are used)"
    return f"{role} cannot be sent to the cluster because it cannot be pickled ({problem}): {what}; {fix}."


def check_picklable(value: Any, role: str, error: Callable[[str], Exception]) -> None:
    """Raise ``error(sentence)`` when ``value`` cannot be pickled."""
    message = explain_unpicklable(value, role)
    if message is not None:
        raise error(message)
