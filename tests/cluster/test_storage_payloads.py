"""Journal payloads read back as exactly the JSON they were, whatever the value (a property
test on the memory store, which encodes payloads as the SQL stores do)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.storage import JournalEntry, MemoryStore
from tests._stores import run_info as info

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=24,
)


def _strict(value: Any) -> str:
    # The standard library's text tells 1 from 1.0 from true, and -0.0 from 0.0.
    return json.dumps(value, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(payload=_JSON)
def test_any_json_payload_reads_back_as_the_same_json(payload: Any) -> None:
    store = MemoryStore()
    store.create_run(info(), {})
    store.append("run", [JournalEntry(version=1, request_id="r", kind="fn", payload=payload, created_at=1.0)]).result()
    _, tail = store.load("run")
    assert _strict(tail[0].payload) == _strict(payload)
