"""Journal entries and recovery for durable orchestrators.

A committed ``apply_batch`` is journalled as its transitions (replayed through ``reduce``);
a committed ``apply(fn)`` as a JSON diff of the state (``fn`` itself is never re-run, it may
not be deterministic). Recovery loads the newest checkpoint and replays the journal after
it, so a restarted actor resumes at exactly the last acknowledged version.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from pydantic import BaseModel

from actors._pickling import pickled_once, unpickled_shared
from actors.agents.registry import load_agent_records
from actors.exceptions import OrchestratorClosed
from actors.handoffs.settings import DEFAULT_MAX_PARALLEL
from actors.orchestrator.changes import Change, ChangeKind
from actors.orchestrator.spec import DEFAULT_KEEP_VERSIONS, RunSpec
from cluster.connect import actor_was_restarted
from cluster.storage import (
    Checkpoint,
    JournalEntry,
    RunInfo,
    Store,
    StoreCorrupted,
    check_durability,
    diff_states,
    open_store,
)
from cluster.storage import replay as replay_journal
from coordinators import StateTransition

__all__ = ["CLOSED_MARK", "Replayed", "journal_entry", "replay", "replay_from", "restore_or_create", "stored_run_spec"]

#: Run metadata: set when the run's owner closes it, cleared when it is explicitly reopened.
CLOSED_MARK = "closed"
_KEEP_CHANGES = 10_000  # replayed changes handed to subscribers: the change log keeps this many
_KEEP_REQUESTS = 50_000  # request ids the actor remembers in memory (older ones are found in the store)


class Replayed(NamedTuple):
    """A run rebuilt from its store: what the orchestrator actor starts from."""

    version: int
    state: BaseModel
    requests: list[tuple[str, int]]
    """``(request_id, version)`` of the newest replayed entries (at most the actor's memory of them)."""
    changes: list[Change]
    """The newest replayed changes (at most what the change log keeps)."""
    checkpoint_version: int
    """The version of the checkpoint the replay started from."""


def journal_entry(
    version: int,
    request_id: str,
    kind: ChangeKind,
    transitions: tuple[StateTransition, ...] | None,
    base: BaseModel,
    new_state: BaseModel,
    diff: Any = None,
) -> JournalEntry:
    """The journal row for one committed write (``diff``: the state diff, if computed already)."""
    if kind == "batch":
        payload: Any = [t.model_dump(mode="json") for t in transitions or ()]
    elif diff is not None:
        payload = diff
    else:
        payload = diff_states(base.model_dump(mode="json"), new_state.model_dump(mode="json"))
    return JournalEntry(version=version, request_id=request_id, kind=kind, payload=payload, created_at=time.time())


def _unpickled(text: str, what: str, store_path: str | None) -> Any:
    try:
        return unpickled_shared(text)
    except Exception as exc:
        raise StoreCorrupted(path=store_path, problem=f"the stored {what} cannot be loaded ({type(exc).__name__}: {exc})") from exc


def restore_or_create(store: Store, spec: RunSpec, *, restarted: bool | None = None, new: bool = False) -> Replayed:
    """Load the run from ``store`` (checkpoint + journal), or create it from ``spec.initial``.

    Returns the version, the state, the request ids seen since the checkpoint and the
    replayed changes (for subscribers). A restarted actor whose run is missing from the store
    is an error, never a silently fresh state. ``restarted`` (default: whether Ray restarted
    this actor) says the run must already be stored. ``new``: the caller read the store and
    found no such run; it is created without reading again (if another process created it
    meanwhile, ``RunExists``).
    """
    info = None if new else store.get_run(spec.name)
    if info is None:
        if actor_was_restarted() if restarted is None else restarted:
            raise StoreCorrupted(
                path=store.path,
                problem=f"run {spec.name!r} is missing from the store after a restart; refusing to start from an empty state",
            )
        store.create_run(
            RunInfo(
                name=spec.name,
                state_type=f"{type(spec.initial).__module__}.{type(spec.initial).__qualname__}",
                created_at=time.time(),
                owner_token=spec.token,
                metadata={
                    "state_class": pickled_once(type(spec.initial)),
                    "caller": spec.caller_pickled or pickled_once(spec.caller),
                    "max_parallel": spec.max_parallel,
                    "durability": spec.durability,
                    "semaphore_scope": spec.semaphore_scope,
                    "checkpoint_every": spec.checkpoint_every,
                    "keep_versions": spec.keep_versions,
                    "keep_days": spec.keep_days,
                    **spec.metadata,
                },
            ),
            spec.initial.model_dump(mode="json"),
        )
        return Replayed(0, spec.initial, [], [], 0)
    return replay(store, spec.name, type(spec.initial))


def replay(store: Store, run: str, state_type: type[BaseModel]) -> Replayed:
    """The run's last committed version and state: its latest checkpoint plus every later
    journal entry. A gap, a damaged row or a state that does not validate raises the store's
    error naming the file and the entry; nothing is ever skipped.
    """
    checkpoint, entries = store.load(run)
    return replay_from(store, run, state_type, checkpoint, entries)


def replay_from(
    store: Store, run: str, state_type: type[BaseModel], checkpoint: Checkpoint, entries: list[JournalEntry]
) -> Replayed:
    """Replay ``entries`` on ``checkpoint`` (the storage layer's ``replay``): the state at the
    last entry's version, with the newest request ids and changes the actor keeps."""
    state = replay_journal(checkpoint, entries, state_type, run=run, path=store.path)
    version = entries[-1].version if entries else checkpoint.version
    tail = entries[-max(_KEEP_CHANGES, _KEEP_REQUESTS):]
    requests = [(e.request_id, e.version) for e in tail[-_KEEP_REQUESTS:]]
    changes = [  # as the live actor publishes them: no request id, no diff (``history`` adds those)
        Change(seq=0, version=e.version, kind=e.kind,
               transitions=tuple(StateTransition.model_validate(t) for t in e.payload) if e.kind == "batch" else None,
               at=e.created_at)
        for e in tail[-_KEEP_CHANGES:]
    ]
    return Replayed(version, state, requests, changes, checkpoint.version)


def stored_run_spec(store_spec: Any, name: str, durability: str | None = None, *, reopen: bool = False) -> RunSpec:
    """Rebuild the ``RunSpec`` of a stored run, to restart it in a new actor: with the
    durability it was created with, unless ``durability`` overrides it. A run its owner closed
    is ``OrchestratorClosed`` unless ``reopen`` (an explicit ``attach``/``resume``, which
    clears the mark); taking a run up again after its host restarted or unloaded it is not."""
    store = open_store(store_spec, durability=check_durability(durability or "sync"))
    try:
        info = store.get_run(name)
        if info is None:
            raise LookupError(f"no stored run named {name!r} in {store.path}")
        if info.metadata.get(CLOSED_MARK):
            if not reopen:
                raise OrchestratorClosed(
                    f"orchestrator {name!r} was closed by its owner; Orchestrator.attach({name!r}, store=...) reopens it"
                )
            store.update_run_metadata(name, {CLOSED_MARK: False})
        durability = info.durability if durability is None else durability
        meta = info.metadata
        state_type = _unpickled(meta["state_class"], "state type", store.path)
        # Replayed here once, so a gap or a damaged entry fails attach with the store's own
        # error (a failing actor constructor would reach the caller only as text).
        initial = replay(store, name, state_type).state
        load_agent_records(store, name)  # a damaged agent record fails attach, not a worker
        return RunSpec(
            name=name,
            named=True,
            token=info.owner_token,
            initial=initial,
            store=store_spec,
            durability=check_durability(durability),
            max_parallel=int(meta.get("max_parallel", DEFAULT_MAX_PARALLEL)),
            caller=_unpickled(meta["caller"], "caller", store.path),
            semaphore_scope=str(meta.get("semaphore_scope") or f"orch:{name}"),
            checkpoint_every=int(meta.get("checkpoint_every", 1_000)),
            keep_versions=meta.get("keep_versions", DEFAULT_KEEP_VERSIONS),
            keep_days=meta.get("keep_days"),
        )
    finally:
        if store is not store_spec:
            store.close()
