"""Several coordinators on one snapshot, merged into one result (nested coordinators).

The conflict rule: results are merged in the order given, which is their priority. Two
transitions *conflict* when they write the same target with different data: the same state
key and scope (``update_state``/``delete_state``), the stage, a capability, a session, the
result of a tool call, or a tool call id. ``on_conflict="first_wins"`` keeps the earlier
result's transition, drops the later one and lists it in ``metadata["merge_conflicts"]``;
``"error"`` raises ``MergeConflict`` naming both coordinators and the target. Identical
writes are kept once. Messages never conflict (appended in order). The merged result
continues only if every result does, hands off to the first ``handoff_to`` given, carries
the lowest confidence, every reasoning and every approval request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from actors.exceptions import MergeConflict
from actors.interrupts import _REQUESTS_KEY
from coordinators import ContextSnapshot, Coordinator, CoordinatorResult, StateTransition, TransitionType, thaw

__all__ = ["merge_results", "MergedCoordinator", "ConflictRule"]

ConflictRule = Literal["first_wins", "error"]
_T = TransitionType


def _target(t: StateTransition) -> tuple[str, ...] | None:
    """What ``t`` writes, for conflict detection (None: never conflicts)."""
    kind, data = t.transition_type, t.data
    if kind in (_T.UPDATE_STATE, _T.DELETE_STATE):
        return ("state", str(data.get("scope", "conversation")), str(data["key"]))
    if kind == _T.UPDATE_STAGE:
        return ("stage",)
    if kind == _T.UPDATE_CAPABILITY:
        return ("capability", str(data["name"]))
    if kind in (_T.CREATE_SESSION, _T.CLOSE_SESSION):
        return ("session", str(data["session_id"]))
    if kind == _T.TOOL_RESULT:
        return ("tool_result", str(data["call_id"]))
    if kind == _T.EXECUTE_TOOL:
        return ("call", str(data["call_id"]))
    return None


def _same(a: StateTransition, b: StateTransition) -> bool:
    return json.dumps(a.model_dump(mode="json"), sort_keys=True) == json.dumps(b.model_dump(mode="json"), sort_keys=True)


def merge_results(
    results: Mapping[str, CoordinatorResult] | Sequence[tuple[str, CoordinatorResult]],
    *,
    on_conflict: ConflictRule = "first_wins",
) -> CoordinatorResult:
    """One ``CoordinatorResult`` from several computed on one snapshot (see the module doc)."""
    if on_conflict not in ("first_wins", "error"):
        raise ValueError(f"on_conflict must be 'first_wins' or 'error', got {on_conflict!r}")
    items = list(results.items()) if isinstance(results, Mapping) else list(results)
    if not items:
        raise ValueError("merge_results needs at least one result")
    for name, result in items:
        if not isinstance(result, CoordinatorResult):
            raise TypeError(f"merge_results: {name!r} gave a {type(result).__name__}, not a CoordinatorResult")
    merged: list[StateTransition] = []
    owners: dict[tuple[str, ...], tuple[str, StateTransition]] = {}
    conflicts: list[dict[str, Any]] = []
    for name, result in items:
        for t in result.transitions:
            target = _target(t)
            if target is None:
                merged.append(t)
                continue
            earlier = owners.get(target)
            if earlier is None:
                owners[target] = (name, t)
                merged.append(t)
            elif _same(earlier[1], t):
                continue
            elif on_conflict == "error":
                raise MergeConflict(
                    f"{earlier[0]!r} and {name!r} both write {'/'.join(target)} differently; "
                    "merge them with on_conflict='first_wins' (earlier results win) or change one coordinator"
                )
            else:
                conflicts.append({"target": list(target), "kept": earlier[0], "dropped": name})
    handoff = next((r.handoff_to for _, r in items if r.handoff_to), None)
    requests = [req for _, r in items for req in r.metadata.get(_REQUESTS_KEY, ())]
    reasoning = "; ".join(f"{name}: {r.reasoning}" for name, r in items if r.reasoning) or None
    metadata: dict[str, Any] = {"merged_from": [name for name, _ in items], "merge_conflicts": conflicts}
    if requests:
        metadata[_REQUESTS_KEY] = [thaw(r) for r in requests]
    return CoordinatorResult(
        transitions=merged,
        reasoning=reasoning,
        confidence=min(r.confidence for _, r in items),
        metadata=metadata,
        should_continue=all(r.should_continue for _, r in items),
        handoff_to=handoff,
    )


class MergedCoordinator:
    """A coordinator that runs ``members`` on the same snapshot concurrently and merges
    their results with ``merge_results`` (members' order = priority)."""

    def __init__(self, name: str, members: Sequence[Coordinator], *, on_conflict: ConflictRule = "first_wins") -> None:
        if not members:
            raise ValueError("MergedCoordinator needs at least one member coordinator")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"MergedCoordinator members need distinct names, got {names}")
        if on_conflict not in ("first_wins", "error"):
            raise ValueError(f"on_conflict must be 'first_wins' or 'error', got {on_conflict!r}")
        self.name = name
        self._members = list(members)
        self._on_conflict: ConflictRule = on_conflict

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        results = await asyncio.gather(*(m.process(snapshot, message) for m in self._members))
        return merge_results([(m.name, r) for m, r in zip(self._members, results)], on_conflict=self._on_conflict)
