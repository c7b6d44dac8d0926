"""Compact, pure diffs between two JSON objects (``model_dump(mode="json")`` of a state).

A diff is a dict with up to four sections, empty ones omitted (``{}`` means no change)::

    {"set": {key: value}, "delete": [key, ...], "append": {key: [tail...]},
     "patch": {key: <diff of the nested object>}}

Per key: a list that extends the old list keeps only the appended tail, a nested object
recurses, anything else is replaced. Equality is JSON equality, so ``1``, ``1.0`` and
``true`` are different values (Python's ``==`` would call them equal). ``apply_diff``
never mutates its inputs, but its result shares unchanged values with them.
"""

from __future__ import annotations

from typing import Any

_SECTIONS = frozenset({"set", "delete", "append", "patch"})


def diff_states(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The diff that turns ``old`` into ``new``: ``apply_diff(old, diff) == new``."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise TypeError(
            f"diff_states needs two dicts, got {type(old).__name__} and {type(new).__name__}"
        )
    sets: dict[str, Any] = {}
    appends: dict[str, list[Any]] = {}
    patches: dict[str, dict[str, Any]] = {}
    deletes = [key for key in old if key not in new]
    for key, value in new.items():
        if key not in old:
            sets[key] = value
            continue
        before = old[key]
        if json_equal(before, value):
            continue
        if type(before) is list and type(value) is list and len(value) > len(before):
            if json_equal(before, value[: len(before)]):
                appends[key] = value[len(before) :]
                continue
        if type(before) is dict and type(value) is dict:
            patches[key] = diff_states(before, value)
            continue
        sets[key] = value
    diff: dict[str, Any] = {}
    for section, content in (
        ("set", sets),
        ("delete", deletes),
        ("append", appends),
        ("patch", patches),
    ):
        if content:
            diff[section] = content
    return diff


def apply_diff(old: dict[str, Any], diff: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``old`` with ``diff`` (from :func:`diff_states`) applied.

    A diff that does not fit ``old`` (unknown section, append to a non-list, patch of a
    non-object, delete of a missing key) raises ``ValueError``.
    """
    unknown = set(diff) - _SECTIONS
    if unknown:
        raise ValueError(f"diff has unknown sections {sorted(unknown)}; expected {sorted(_SECTIONS)}")
    result = dict(old)
    for key in diff.get("delete", ()):
        if key not in result:
            raise ValueError(f"diff deletes key {key!r}, which is not present")
        del result[key]
    for key, value in diff.get("set", {}).items():
        result[key] = value
    for key, tail in diff.get("append", {}).items():
        current = result.get(key)
        if type(current) is not list or type(tail) is not list:
            raise ValueError(f"diff appends to key {key!r}, which is not a list")
        result[key] = current + tail
    for key, nested in diff.get("patch", {}).items():
        current = result.get(key)
        if type(current) is not dict or type(nested) is not dict:
            raise ValueError(f"diff patches key {key!r}, which is not an object")
        result[key] = apply_diff(current, nested)
    return result


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values that tells ``1``, ``1.0`` and ``true`` apart.

    Scalars are compared inline rather than by recursion: this runs over every element
    of long message lists, and the inline loops take half the time of a recursive call.
    """
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        if a.keys() != b.keys():
            return False
        for key, value in a.items():
            other = b[key]
            if value is not other and not (type(value) is type(other) and _inner_equal(value, other)):
                return False
        return True
    if kind is list:
        if len(a) != len(b):
            return False
        for value, other in zip(a, b):
            if value is not other and not (type(value) is type(other) and _inner_equal(value, other)):
                return False
        return True
    return bool(a == b)


def _inner_equal(value: Any, other: Any) -> bool:
    """Two values of the same type: containers recurse, scalars compare."""
    if type(value) is dict or type(value) is list:
        return json_equal(value, other)
    return bool(value == other)
