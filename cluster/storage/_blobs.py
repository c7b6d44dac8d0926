"""Long metadata values stored once per store, however many runs carry them.

Every run's metadata holds its pickled caller and state class: a skill registry pickled by
value is about 16 KB, the same text for every run a driver starts with it. Stored inline,
1,050 such runs took 22.6 MB of SQLite file (0.6 MB with one copy). A SQL store keeps each
such value once, in ``blobs`` under the SHA-256 of its text, and the run's row holds
``{"$blob": digest}``; reads give the value back, so ``RunInfo.metadata`` is the same either
way. One row per distinct caller, deleted by ``collect_blobs`` (``soloist gc``) once no run
refers to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["BLOB_MIN_CHARS", "pack_metadata", "unpack_metadata", "blob_digests"]

BLOB_MIN_CHARS = 1024  # a top-level string value at least this long is stored as a blob
_MARK = "$blob"


@lru_cache(maxsize=32)
def _digest(text: str) -> str:
    # Cached: a driver's runs share one caller text object, hashed once instead of per run.
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_mark(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_MARK), str)


def pack_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``metadata`` as stored (each long string value replaced by its mark) and the blobs it
    needs, by digest. ``ValueError`` for a value that is itself shaped like a mark."""
    packed: dict[str, Any] = {}
    blobs: dict[str, str] = {}
    for key, value in metadata.items():
        if _is_mark(value):
            raise ValueError(f"run metadata {key!r}: a value of the form {{{_MARK!r}: ...}} is reserved for the store")
        if isinstance(value, str) and len(value) >= BLOB_MIN_CHARS:
            digest = _digest(value)
            blobs[digest] = value
            packed[key] = {_MARK: digest}
        else:
            packed[key] = value
    return packed, blobs


def blob_digests(stored: Mapping[str, Any]) -> list[str]:
    """The digests stored metadata refers to."""
    return [value[_MARK] for value in stored.values() if _is_mark(value)]


def unpack_metadata(stored: Mapping[str, Any], text_of: Callable[[str], str]) -> dict[str, Any]:
    """Stored metadata with each mark replaced by its blob's text (``text_of(digest)``)."""
    return {key: text_of(value[_MARK]) if _is_mark(value) else value for key, value in stored.items()}
