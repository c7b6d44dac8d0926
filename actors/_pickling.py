"""Objects stored as text: cloudpickle, then base64, so they fit in JSON records.

Owns the one encoding used for everything soloist stores by value rather than by data
(a run's state class and caller, a coordinator hosted by an agent).

A process that starts or hosts many runs pickles and loads the same few objects over and
over (one skill registry and one state class for thousands of runs; by value, when they come
from ``__main__``, that costs about 1.5 ms a run). :func:`pickled_once` and
:func:`unpickled_shared` do it once per object: for classes, and for objects that name their
own content with a ``pickle_key`` string (a skill registry's digest of its skills, which
changes when a skill is registered). Anything else is pickled and loaded every time, as
before: a copy of its own per run.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from typing import Any

import cloudpickle

__all__ = ["pickled", "pickled_once", "shareable", "unpickled", "unpickled_shared"]

_KEPT = 256  # objects (and texts) remembered per process, most recently used first
_lock = threading.Lock()
_texts: OrderedDict[tuple[int, str | None], tuple[Any, str]] = OrderedDict()  # (id, key) -> (object, text)
_objects: OrderedDict[str, Any] = OrderedDict()  # text -> the one object loaded from it


def pickled(value: Any) -> str:
    """``value`` (anything cloudpickle can pickle) as JSON-clean ASCII text."""
    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def unpickled(text: str) -> Any:
    """The object ``pickled`` turned into ``text`` (raises what cloudpickle/base64 raise)."""
    return cloudpickle.loads(base64.b64decode(text))


def shareable(value: Any) -> bool:
    """Whether ``pickled_once`` and ``unpickled_shared`` keep one copy of ``value``."""
    return isinstance(value, type) or isinstance(getattr(value, "pickle_key", None), str)


def pickled_once(value: Any) -> str:
    """``pickled(value)``, computed once for a class or for an object with a ``pickle_key``
    and reused while that key stays the same; anything else is pickled on every call."""
    if not shareable(value):
        return pickled(value)
    ident = (id(value), None if isinstance(value, type) else value.pickle_key)
    with _lock:
        hit = _texts.get(ident)
        if hit is not None and hit[0] is value:
            _texts.move_to_end(ident)
            return hit[1]
    text = pickled(value)
    with _lock:
        _texts[ident] = (value, text)  # the object is held: its id is not reused while cached
        while len(_texts) > _KEPT:
            _texts.popitem(last=False)
    return text


def unpickled_shared(text: str) -> Any:
    """``unpickled(text)``, loaded once per process for a class or an object with a
    ``pickle_key``, and that one object returned for every equal text (every run a host
    holds from one driver's registry shares one copy, as that driver's runs share the
    original); anything else is a new copy each call."""
    with _lock:
        if text in _objects:
            _objects.move_to_end(text)
            return _objects[text]
    value = unpickled(text)
    if shareable(value):
        with _lock:
            value = _objects.setdefault(text, value)  # a racing thread's copy wins: one object
            while len(_objects) > _KEPT:
                _objects.popitem(last=False)
    return value
