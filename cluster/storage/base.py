"""The store interface and the records it holds.

A store keeps, per run (one orchestrator, named by a string): its :class:`RunInfo`, the
:class:`Checkpoint`\\ s of its retention window, the journal of committed changes since (one
:class:`JournalEntry` per version, versions strictly consecutive) and the run's
managed-agent records. Restart = latest checkpoint + every journal entry after it.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, Field

from .exceptions import DuplicateRequest, JournalGap

Durability = Literal["sync", "batch", "exit"]

#: The durability modes, in the order they are documented.
DURABILITY_MODES: tuple[str, ...] = get_args(Durability)


def check_durability(durability: object) -> Durability:
    """``durability`` itself when it is one of ``sync``, ``batch``, ``exit``; else a
    ``ValueError`` naming the value. The one check of a durability mode, wherever it comes
    from (a constructor, ``attach``, the command line, a stored run)."""
    if durability not in DURABILITY_MODES:
        raise ValueError(f"durability must be one of {', '.join(map(repr, DURABILITY_MODES))}, got {durability!r}")
    return durability  # type: ignore[return-value]  # narrowed by the membership test above
"""``sync``: the orchestrator waits for each append to be durable before the next write.
``batch``: it pipelines appends and waits only when asked (both share the group-commit
writer). ``exit``: entries stay in memory until ``flush``/``close`` (lost on a crash)."""

KEEP_CHECKPOINTS = 2


class JournalEntry(BaseModel):
    """One committed change: the transitions of a batch, or the state diff of an ``fn``."""

    model_config = ConfigDict(frozen=True)

    version: int
    request_id: str
    kind: Literal["batch", "fn"]
    payload: Any
    created_at: float


class Checkpoint(BaseModel):
    """A full state (``model_dump(mode="json")``) as of ``version``."""

    model_config = ConfigDict(frozen=True)

    version: int
    state: dict[str, Any]
    created_at: float


class RunInfo(BaseModel):
    """A run's identity. ``owner_token`` is the capability to write: never log it."""

    model_config = ConfigDict(frozen=True)

    name: str
    state_type: str
    created_at: float
    owner_token: str = Field(repr=False)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def durability(self) -> Durability:
        """The durability the run was created with (``sync`` for runs stored before it was
        recorded): what attaching to it again uses unless told otherwise."""
        value = self.metadata.get("durability", "sync")
        if value not in DURABILITY_MODES:
            raise ValueError(f"run {self.name!r} is stored with an unknown durability {value!r}; "
                             f"it must be one of {', '.join(map(repr, DURABILITY_MODES))}")
        return value  # one of DURABILITY_MODES: checked above


class AgentRecordRow(BaseModel):
    """A managed-agent record as stored; ``seq`` is the run's write counter at its last put."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    record: dict[str, Any]
    updated_at: float
    seq: int


class StoreStatistics(BaseModel):
    """Counters of one store. ``commits`` counts write operations (an append call, a
    checkpoint, ...); ``fsync_batches`` the transactions that carried them."""

    model_config = ConfigDict(frozen=True)

    path: str | None
    durability: Durability | None
    journal_rows: int
    checkpoints: int
    commits: int
    fsync_batches: int
    mean_batch_size: float
    reconnects: int = 0
    """Write connections opened again after the database server went away (PostgreSQL)."""


class StoreHealth(BaseModel):
    """Whether a store answers now (``soloist status``): for a server, its version and the
    latency of a trivial query; otherwise the error that says why not."""

    model_config = ConfigDict(frozen=True)

    location: str
    """The file, or the URL without its password."""
    kind: Literal["sqlite", "postgresql", "memory"]
    reachable: bool
    server: str | None = None
    latency_ms: float | None = None
    error: str | None = None


@runtime_checkable
class Store(Protocol):
    """Durable storage of runs. Reads block on disk: call them off the event loop."""

    path: str | None

    def create_run(self, info: RunInfo, initial_state: dict[str, Any]) -> None:
        """Durably store the run and its checkpoint at version 0; ``RunExists`` if present."""

    def get_run(self, name: str) -> RunInfo | None:
        """The run's info, or None."""

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""

    def append(
        self, run: str, entries: Sequence[JournalEntry]
    ) -> concurrent.futures.Future[None]:
        """Enqueue entries (first version = last+1, consecutive); the future resolves once
        they are durable or fails (``JournalGap``, ``DuplicateRequest``, write errors).
        Never blocks on disk; thread-safe."""
        ...

    def flush(self) -> None:
        """Block until everything enqueued so far is durable."""

    def find_request(self, run: str, request_id: str) -> int | None:
        """The version committed with ``request_id`` (also after compaction), or None."""

    def find_requests(self, run: str, request_ids: Sequence[str]) -> dict[str, int]:
        """``find_request`` of many ids at once: the ids that were committed, with their versions."""
        ...

    def all_requests(self, run: str, *, at_most: int) -> dict[str, int] | None:
        """Every request id the store holds for the run, with its version, when it holds at
        most ``at_most`` of them; None when it holds more. A caller that keeps these in memory
        knows any other id was never committed (or was compacted away: then the store could
        not tell either) without asking the store."""
        ...

    def load(self, run: str) -> tuple[Checkpoint, list[JournalEntry]]:
        """The latest checkpoint and every later journal entry, in order; ``JournalGap`` on a hole."""
        ...

    def put_checkpoint(self, run: str, version: int, state: dict[str, Any]) -> None:
        """Durably store a checkpoint at ``version`` (<= last journal version); ``compact`` prunes."""

    def compact(self, run: str, *, keep_from: int | None = None) -> int:
        """Delete journal rows no longer needed; return how many. Without ``keep_from``: rows
        covered by the latest checkpoint (the last 2 checkpoints stay). With it: everything
        older than the newest checkpoint at or before ``keep_from`` (the retention window)."""
        ...

    def oldest_version(self, run: str) -> int:
        """The earliest version whose state can still be rebuilt (the oldest checkpoint)."""
        ...

    def entries(self, run: str, since: int, until: int) -> list[JournalEntry]:
        """The kept journal entries with ``since < version <= until``, in version order."""
        ...

    def load_at(self, run: str, version: int) -> tuple[Checkpoint, list[JournalEntry]]:
        """The newest checkpoint at or before ``version`` and the entries up to it;
        ``VersionCompacted`` naming the oldest kept version when none is that old."""
        ...

    def delete_run(self, run: str) -> None:
        """Durably delete the run and everything stored for it; ``RunNotFound`` if absent."""

    def collect_blobs(self) -> int:
        """Delete what the store keeps for runs it no longer holds (long metadata values
        stored once for many runs); return how many values. ``soloist gc`` calls it."""
        ...

    def update_run_metadata(self, run: str, changes: dict[str, Any]) -> RunInfo:
        """Durably merge ``changes`` (JSON-clean) into the run's metadata."""
        ...

    def put_agent(self, run: str, agent_id: str, record: dict[str, Any]) -> AgentRecordRow:
        """Durably upsert an agent record with the run's next ``seq``."""
        ...

    def get_agent(self, run: str, agent_id: str) -> AgentRecordRow | None:
        """One agent record, or None."""

    def list_agents(self, run: str) -> list[AgentRecordRow]:
        """The run's agent records in ``seq`` order (least recently written first)."""
        ...

    def statistics(self) -> StoreStatistics:
        """Counters for metrics and ``soloist status``."""
        ...

    def close(self) -> None:
        """Flush and release resources; idempotent."""

    # -- one writer per run ---------------------------------------------------------------
    # A store that processes share (a file, a database) keeps each run to one writer with
    # claims and fencing epochs (``SingleWriter``: SQLite, PostgreSQL). The bodies here are
    # the defaults of a store that lives in one process (``MemoryStore``): it has no other
    # writer to claim the run from or to fence. A run's writer calls these on every store.

    def claim_writer(self, run: str, *, holder: dict[str, Any], timeout: float = 2.0) -> None:
        """Become the run's one writer until ``release_writer``, ``close`` or the end of this
        process; ``RunLockedElsewhere`` naming the holder when another writer keeps the claim
        past ``timeout`` seconds. ``holder`` is recorded for whoever is refused next.
        Default: nothing to claim."""
        return None

    def check_writer(self, run: str) -> None:
        """``RunLockedElsewhere`` naming the holder when another process (or store object)
        holds the run's claim. Default: nobody else can."""
        return None

    def release_writer(self, run: str) -> None:
        """Stop being the run's writer (idempotent). Default: nothing was claimed."""
        return None

    def activate_async(self, run: str, *, holder: dict[str, Any]) -> concurrent.futures.Future[int] | None:
        """Take the run up as its newest activation: the future of its new fencing epoch,
        after which every write of an older activation is refused (``WriterFenced``). None
        (the default): the store does not fence, having no other writer."""
        return None

    def deactivate(self, run: str) -> None:
        """Stop writing the run as its activation (unloaded or closed); idempotent. Default:
        nothing was activated."""
        return None


_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def dump_json(value: Any, what: str) -> str:
    """Encode a JSON-clean value compactly; ``ValueError`` naming ``what`` otherwise (an
    unpaired surrogate included: no database can store that text, and refused here it fails
    this write alone, not the group commit it would have joined)."""
    try:
        text = _COMPACT.encode(value)  # one encoder: json.dumps would build one per call
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-clean: {exc}") from exc
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{what} is not JSON-clean: it holds an unpaired surrogate {text[exc.start]!r} "
                             "(not valid Unicode text)") from None
    return text


def check_request_id(request_id: object) -> str:
    """``request_id`` itself when a store can keep it: a non-empty string of valid Unicode
    text without NUL (PostgreSQL refuses NUL in text, and no encoding holds an unpaired
    surrogate). ``ValueError`` naming it otherwise."""
    if not isinstance(request_id, str) or not request_id.strip():
        raise ValueError(f"request_id must be a non-empty string or None, got {request_id!r}")
    if not request_id.isascii() or "\x00" in request_id:
        if "\x00" in request_id:
            raise ValueError(f"request_id {request_id!r} holds a NUL character, which a store cannot keep")
        try:
            request_id.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"request_id {request_id!r} holds an unpaired surrogate (not valid Unicode text)") from None
    return request_id


def dump_json_values(value: Any, what: str | Callable[[], str]) -> str:
    """:func:`dump_json` of a value made of JSON values only (dicts with ``str`` keys, lists,
    ``str``, ``int``, ``float``, ``bool``, ``None``: what ``model_dump(mode="json")`` makes),
    encoded by orjson in a tenth of the time. Where orjson's text could mean something else
    (it writes NaN and the infinities as ``null``) or it refuses (integers past 64 bits,
    unpaired surrogates, other keys), the value takes :func:`dump_json`'s path, which
    refuses what is not JSON-clean. ``what`` may be a function: it is only called then."""
    try:
        data = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        data = None
    if data is None or b"null" in data:  # a null may have been a NaN: let the stdlib decide
        return dump_json(value, what if isinstance(what, str) else what())
    return data.decode()


def payload_text(entry: JournalEntry) -> str:
    """The stored text of a journal entry's payload (:func:`dump_json_values`)."""
    return dump_json_values(entry.payload, lambda: f"payload of version {entry.version}")


def check_entries(
    path: str | None,
    run: str,
    last: int,
    entries: Sequence[JournalEntry],
    committed: Callable[[str], int | None],
) -> None:
    """Raise ``JournalGap``/``DuplicateRequest`` unless ``entries`` continue ``last`` with
    fresh request ids. ``committed`` looks up the version a request id was stored with."""
    seen: dict[str, int] = {}
    expected = last + 1
    for entry in entries:
        if entry.version != expected:
            raise JournalGap(
                path=path,
                run=run,
                missing=expected,
                detail=f"append of version {entry.version} after version {expected - 1}",
            )
        previous = seen.get(entry.request_id)
        if previous is None:
            previous = committed(entry.request_id)
        if previous is not None:
            raise DuplicateRequest(
                path=path, run=run, request_id=entry.request_id, version=previous
            )
        seen[entry.request_id] = entry.version
        expected += 1


def check_tail(path: str | None, run: str, base: int, entries: Sequence[JournalEntry]) -> None:
    """Raise ``JournalGap`` unless ``entries`` are exactly versions base+1, base+2, ..."""
    for offset, entry in enumerate(entries, start=1):
        if entry.version != base + offset:
            raise JournalGap(
                path=path,
                run=run,
                missing=base + offset,
                detail=f"checkpoint at version {base}, next stored entry is {entry.version}",
            )
