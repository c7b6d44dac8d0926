"""Starting and finding orchestrator actors: names, placement, restarts, store checks.

Kept apart from the ``Orchestrator`` facade: this is the part that decides where a run's
actor lives and how it survives crashes, and it never touches run state.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from actors.exceptions import OrchestratorNotFound
from actors.orchestrator._actor import OrchestratorActor
from actors.orchestrator._placement_kind import placement_of, scheduling_strategy
from actors.orchestrator.spec import RunSpec
from cluster.connect import SOLOIST_NAMESPACE
from cluster.storage import Durability, RunLockedElsewhere, Store, check_durability, is_postgres_url, open_store, portable_path

__all__ = ["actor_name", "start_actor", "prepare_store", "store_location", "stored_owner", "translate_creation_error", "writer_elsewhere"]

_RemoteOrchestrator = ray.remote(OrchestratorActor)


def actor_name(run_name: str) -> str:
    """The Ray actor name of a named run, in the ``soloist`` namespace."""
    return f"soloist:orch:{run_name}"


def lookup_live(name: str, timeout: float = 30.0) -> Any:
    """The named orchestrator actor, or None when no actor holds the name.

    Right after the driver that created a (non-detached) run dies, the name can still resolve
    while Ray has already dropped that job's actor class, and ``ray.get_actor`` fails with an
    ``AssertionError`` from inside Ray. The actor is being torn down: look again until the
    name is free (or the actor is usable), so ``attach(name, store=...)`` can restart the run.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get_actor(actor_name(name), namespace=SOLOIST_NAMESPACE)
        except ValueError:
            return None
        except AssertionError:
            if time.monotonic() > deadline:
                raise OrchestratorNotFound(
                    f"orchestrator {name!r} belongs to a driver that exited and Ray has not released its name after "
                    f"{timeout:.0f}s; try attach() again"
                ) from None
            time.sleep(0.1)


def live_run_names() -> list[str]:
    """The names of the runs whose orchestrator actor is alive on the connected cluster, sorted."""
    prefix = actor_name("")
    return sorted(
        entry["name"][len(prefix):]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry.get("namespace") == SOLOIST_NAMESPACE and entry["name"].startswith(prefix)
    )


def start_actor(spec: RunSpec, *, detached: bool) -> Any:
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1000}
    if spec.named:
        options.update(name=actor_name(spec.name), namespace=SOLOIST_NAMESPACE)
    if detached:
        options["lifetime"] = "detached"
    # The orchestrator lives on the node of the driver that created (or attached) it. Pinned
    # when its store is a file (it is there, and worker nodes come and go: Ray spills "soft"
    # placements to other nodes, where a node removal would take the run down and a restarted
    # actor would not find its file); only preferred when its store is a database, so Ray
    # restarts it on a surviving node when that node is lost.
    options["scheduling_strategy"] = scheduling_strategy(placement_of(spec.store))
    if spec.store is not None:
        # Durable runs restart after a crash, and Ray resends in-flight writes: exactly-once
        # because every write carries a request id.
        options.update(max_restarts=-1, max_task_retries=-1)
    try:
        return _RemoteOrchestrator.options(**options).remote(spec)
    except ValueError as exc:
        if spec.named and "already" in str(exc).lower():
            raise ValueError(
                f"an orchestrator named {spec.name!r} is already running; use Orchestrator.attach({spec.name!r}) to get a handle"
            ) from None
        raise


def prepare_store(store: Any, name: str, durability: str, *, creating: bool) -> Any:
    """Validate the store in this process (so a bad file fails the constructor) and return what the actor opens."""
    if store is None:
        return None
    opened = open_store(store, durability=check_durability(durability))
    try:
        exists = opened.get_run(name) is not None
    finally:
        if opened is not store:
            opened.close()
    if creating and exists:
        raise ValueError(f"the store already holds a run named {name!r}; use Orchestrator.attach({name!r}, store=...) to resume it")
    if not creating and not exists:
        raise OrchestratorNotFound(f"no live orchestrator and no stored run named {name!r} in {getattr(opened, 'path', store)}")
    if isinstance(store, Store) or is_postgres_url(store):
        return store
    # absolute: the actor opens it, and a worker's current directory need not be the driver's
    return portable_path(store)


def store_location(store: Any) -> Any:
    """What a host opens for ``store``: an absolute path (a worker's current directory need not
    be the driver's), a database URL or a store object as it is, or None. Type errors are the
    caller's own."""
    if store is None or isinstance(store, Store) or is_postgres_url(store):
        return store
    if isinstance(store, (str, os.PathLike)):
        return portable_path(store)
    raise TypeError(f"store must be a path, a Store or None, not {type(store).__name__}")


def stored_owner(store: Any, name: str) -> tuple[str | None, Durability | None]:
    """The owner token and the durability of the stored run ``name`` (None, None: not stored)."""
    opened = open_store(store)
    try:
        info = opened.get_run(name)
    finally:
        if opened is not store:
            opened.close()
    return (info.owner_token, info.durability) if info is not None else (None, None)


def translate_creation_error(exc: BaseException, name: str) -> BaseException:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError):
        return cause
    return RuntimeError(f"orchestrator {name!r} failed to start: {exc}")


def writer_elsewhere(store: Any, name: str) -> RunLockedElsewhere | None:
    """After an actor failed to start on ``store``: the ``RunLockedElsewhere`` that explains
    it when another process holds the run open for writing (Ray reports an actor's creation
    error only as text), else None."""
    if store is None or isinstance(store, Store):
        return None
    opened = open_store(store)
    try:
        opened.check_writer(name)
    except RunLockedElsewhere as exc:
        return exc
    finally:
        opened.close()
    return None
