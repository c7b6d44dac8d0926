"""What builds an ``Orchestrator`` handle: a new run's checked spec, and what ``attach`` finds.

A new run's arguments are checked here, before anything reaches Ray (``ValueError`` /
``TypeError`` naming the bad one), and become its ``RunSpec``. ``attach`` resolves a name to
the run's writer: a live dedicated actor, a run its host holds, or a run started again from
its store; the facade wraps what it finds (``Found``) in a handle. Nothing here touches run
state.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray
from pydantic import BaseModel

from actors._pickle_check import explain_unpicklable
from actors.callers.protocol import ToolCaller
from actors.exceptions import NotPicklable, OrchestratorClosed, OrchestratorNotFound
from actors.orchestrator._calls import send, wait_ready
from actors.orchestrator._commands import Describe
from actors.orchestrator._json_clean import json_round_trip
from actors.orchestrator._launch import (
    live_run_names,
    lookup_live,
    prepare_store,
    start_actor,
    store_location,
    stored_owner,
    translate_creation_error,
    writer_elsewhere,
)
from actors.orchestrator._placement import HostedActor, hosted_handle, reloadable_handle
from actors.orchestrator._recovery import stored_run_spec
from actors.orchestrator._reload import Reload
from actors.orchestrator.hosts import hosted_runs
from actors.orchestrator.spec import RunDescription, RunSpec
from cluster.connect import current_job_id, ensure_connected, wait_ref
from cluster.storage import Store, check_durability

__all__ = ["Found", "check_max_parallel", "check_retention", "check_state", "find_run", "live_runs", "new_run_spec", "owner_job", "starting"]


def check_state(initial: Any) -> None:
    if not isinstance(initial, BaseModel):
        raise TypeError(
            f"Orchestrator(initial=...) takes a pydantic model instance (e.g. AgentState()), got {type(initial).__name__}"
        )
    try:
        json_round_trip(initial)  # also refuses nan/inf, which pydantic would silently store as null
    except Exception as exc:
        raise TypeError(
            f"Orchestrator state {type(initial).__name__} must round-trip through JSON (it is journalled and shipped "
            f"between processes): {exc}"
        ) from exc


def check_max_parallel(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"max_parallel must be an int, got {type(n).__name__}")
    return n


def check_retention(keep_versions: Any, keep_days: Any) -> None:
    if keep_versions is not None and (isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1):
        raise ValueError(f"keep_versions must be an int >= 1 or None (keep every version), got {keep_versions!r}")
    if keep_days is not None and (isinstance(keep_days, bool) or not isinstance(keep_days, (int, float)) or not keep_days > 0):
        raise ValueError(f"keep_days must be a number > 0 or None (no age limit), got {keep_days!r}")


def _explain_pickling_failure(exc: BaseException, *, initial: BaseModel, caller: Any) -> None:
    """Raise ``NotPicklable`` naming what cannot travel to the orchestrator actor, if that is
    why starting it failed; return (and let ``exc`` propagate) otherwise."""
    for value, role in ((initial, "the initial state"), (caller, "the caller")):
        if value is None:
            continue
        message = explain_unpicklable(value, role)
        if message is not None:
            raise NotPicklable(message) from exc


def new_run_spec(
    initial: BaseModel,
    *,
    caller: ToolCaller | None,
    name: str | None,
    store: str | Store | None,
    durability: str,
    max_parallel: int,
    semaphore_scope: str | None,
    checkpoint_every: int,
    keep_versions: int | None,
    keep_days: float | None,
    dedicated: bool,
    unload_after_s: float | None,
    metadata: dict[str, Any] | None,
) -> RunSpec:
    """Check a new run's arguments (``ValueError``/``TypeError`` naming the bad one) and build
    its spec; connects to Ray first when nothing is connected."""
    check_state(initial)
    if not isinstance(dedicated, bool):
        raise TypeError(f"dedicated must be True or False, got {dedicated!r}")
    if unload_after_s is not None and (isinstance(unload_after_s, bool) or not isinstance(unload_after_s, (int, float))
                                       or not unload_after_s > 0):
        raise ValueError(f"unload_after_s must be a number of seconds > 0 or None (the host's default), got {unload_after_s!r}")
    check_durability(durability)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"name must be a non-empty string or None, got {name!r}")
    if semaphore_scope is not None and (not isinstance(semaphore_scope, str) or not semaphore_scope.strip()):
        raise ValueError(f"semaphore_scope must be a non-empty string or None, got {semaphore_scope!r}")
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be an int >= 0 (0 disables checkpoints), got {checkpoint_every!r}")
    check_max_parallel(max_parallel)
    check_retention(keep_versions, keep_days)
    if caller is not None and not callable(getattr(caller, "call_tool", None)):
        raise TypeError(f"caller must implement the ToolCaller protocol (async call_tool(name, arguments)), got {type(caller).__name__}")
    ensure_connected()
    run_name = name or f"run-{uuid.uuid4().hex[:12]}"
    # A hosted run's store is opened (and checked) by its host, which holds it open for
    # every run of that file; a dedicated actor's is checked here first.
    store_spec = prepare_store(store, run_name, durability, creating=True) if dedicated else store_location(store)
    return RunSpec(
        name=run_name,
        named=name is not None,
        token=secrets.token_urlsafe(32),
        initial=initial,
        store=store_spec,
        durability=check_durability(durability),
        max_parallel=max_parallel,
        caller=caller,
        # Not derived from the run's name: subagents get the scope, never the name.
        semaphore_scope=semaphore_scope or f"orch-{secrets.token_hex(8)}",
        checkpoint_every=checkpoint_every,
        keep_versions=keep_versions,
        keep_days=keep_days,
        unload_after_s=unload_after_s,
        metadata=metadata or {},
    )


def owner_job(detached: bool) -> str | None:
    """The job whose end closes a hosted run (None: a detached run outlives its driver)."""
    return None if detached else current_job_id()


@contextlib.contextmanager
def starting(spec: RunSpec) -> Iterator[None]:
    """Around starting a run's actor: Ray's wrapping of a creation error unwrapped, and a
    spec Ray could not pickle explained by naming the culprit."""
    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        raise translate_creation_error(exc, spec.name) from None
    except Exception as exc:  # Ray could not pickle the spec: name the culprit, or re-raise as is
        _explain_pickling_failure(exc, initial=spec.initial, caller=spec.caller)
        raise


# ------------------------------------------------------------------ attach


@dataclass(frozen=True)
class Found:
    """A run's writer as ``attach`` found it, for a handle to wrap."""

    actor: Any
    """A dedicated actor's Ray handle, or a ``HostedActor``."""
    described: RunDescription
    token: str | None
    borrowed: bool
    """The run was live: the handle only borrows it (its ``close()`` leaves the run alone).
    False when this attach started the run again from its store."""


def find_run(name: str, *, store: Any, durability: str | None, token: str | None) -> Found:
    """The live run called ``name``, or that run started again from ``store`` (see
    ``Orchestrator.attach``)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"attach() needs the run's name, got {name!r}")
    if durability is not None:
        check_durability(durability)
    ensure_connected()
    if store is not None:
        stored_token, stored_durability = stored_owner(store, name)
        token = token if token is not None else stored_token
        durability = durability or stored_durability
    durability = durability or "sync"  # a run not stored (yet): what it is opened with is moot
    handle = lookup_live(name) or hosted_handle(name)
    location = store_location(store)
    if isinstance(handle, HostedActor) and isinstance(location, str):
        # Whoever can open the run's store may bring it back after its host restarted.
        handle = handle.with_reload(Reload(store=location, durability=durability))
    if handle is None:
        if store is None:
            raise OrchestratorNotFound(
                f"no live orchestrator named {name!r}; pass store=... to restart it from its stored journal"
            )
        return _restart_from_store(name, store, durability, token)
    try:
        described: RunDescription = wait_ref(send(handle, Describe()))
    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
        if isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(exc.cause, OrchestratorClosed):
            raise
        if store is None:  # the name still resolved to a run (its actor, or its host's slot) just closed
            raise OrchestratorNotFound(f"orchestrator {name!r} is no longer running; pass store=... to restart it") from None
        return _restart_from_store(name, store, durability, token)
    return Found(handle, described.model_copy(update={"name": name}), token, borrowed=True)


def _restart_from_store(name: str, store: str | Store, durability: str, token: str | None) -> Found:
    store_spec = prepare_store(store, name, durability, creating=False)
    if isinstance(store_spec, str):
        # Hosted: the run's first call on its host activates it from the store, reopening it
        # if its owner closed it (this explicit attach only: the handle's own Reload, which
        # its copies carry, never brings a closed run back).
        reopening = reloadable_handle(name, Reload(store=store_spec, durability=durability, reopen=True))
        hosted = reloadable_handle(name, Reload(store=store_spec, durability=durability))
        try:
            described = wait_ref(reopening.send(Describe()))
        except ray.exceptions.RayTaskError as exc:
            raise translate_creation_error(exc, name) from None
        return Found(hosted, described.model_copy(update={"name": name}), token, borrowed=False)
    spec = stored_run_spec(store_spec, name, durability, reopen=True)
    handle = start_actor(spec, detached=False)
    try:
        wait_ready(handle, name)
    except RuntimeError:
        elsewhere = writer_elsewhere(store_spec, name)  # another process writes the run: say which
        if elsewhere is not None:
            raise elsewhere from None
        raise
    return Found(handle, spec.described(), spec.token, borrowed=False)


def live_runs() -> list[str]:
    """The names of the runs alive on the connected cluster (started with ``name=``), sorted."""
    ensure_connected()
    return sorted({*live_run_names(), *(record.name for _, record in hosted_runs() if record.named)})
