"""The orchestrator-side registry of a run's managed agents.

Lives inside the orchestrator actor. Every lifecycle change goes through
:func:`actors.agents.managed.transition` (the one guard), is written to the store (fsynced)
**before** it is published as an ``agent_state`` event, and both happen under one lock, so
the store and every subscriber see the changes of the run in the same order.

After a restart the registry holds the stored records without handles. An agent is
re-created from its record on first use (:meth:`AgentRegistry.ensure`); concurrent first
uses share one creation. A subagent is re-created by the ``ReplicaFactory`` the orchestrator
actor injects (the handoff layer's, which sits above this module).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from actors._pickling import unpickled
from actors.agents.coordinator_host import create_coordinator_actor
from actors.agents.managed import (
    AgentConfig,
    AgentKind,
    Lifecycle,
    ManagedAgent,
    from_stored_record,
    new_agent,
    to_payload,
    to_stored_record,
    transition,
)
from actors.exceptions import AgentNotFound
from cluster.storage import StoreCorrupted

__all__ = ["AgentRegistry", "ReplicaFactory", "load_agent_records"]

#: ``factory(caller, skill, name=..., num_cpus=...)``: the named subagent replica serving
#: ``skill`` for ``caller`` (joined if alive, created otherwise).
ReplicaFactory = Callable[..., Any]

_LOG = {"component": "agent-registry"}


def load_agent_records(store: Any, run: str) -> dict[str, ManagedAgent]:
    """Every stored agent of ``run``, validated; ``StoreCorrupted`` naming the file and the
    agent if a record does not validate (never a silently dropped agent)."""
    agents: dict[str, ManagedAgent] = {}
    for row in store.list_agents(run):
        try:
            agent = from_stored_record(row.record)
        except ValidationError as exc:
            problem = f"record of agent {row.agent_id!r} in run {run!r} does not validate: {_short(exc)}"
            raise StoreCorrupted(path=store.path, problem=problem) from exc
        if agent.agent_id != row.agent_id or agent.run != run:
            problem = f"record stored as agent {row.agent_id!r} of run {run!r} names agent {agent.agent_id!r} of run {agent.run!r}"
            raise StoreCorrupted(path=store.path, problem=problem)
        agents[agent.agent_id] = agent
    return agents


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<record>'}: {e['msg']}" for e in exc.errors())


class AgentRegistry:
    """Tracks the agents of one run: persisted, published in order, restored lazily."""

    def __init__(
        self,
        run: str,
        *,
        store: Any,
        publish: Callable[[dict[str, Any]], None],
        io: Callable[[Callable[[], Any]], "asyncio.Future[Any]"],
        caller: Any,
        log: logging.LoggerAdapter[logging.Logger] | logging.Logger,
        replica_factory: ReplicaFactory,
        stored_records: bool = True,
    ) -> None:
        """``stored_records``: False for a run just created, whose store holds no agent of it
        (its records are not read)."""
        self._run = run
        self._store = store
        self._publish = publish  # appends an agent_state event to the run's change log
        self._io = io  # runs a blocking store call off the event loop
        self._caller = caller  # the run's ToolCaller: what a re-created subagent serves
        self._replica_factory = replica_factory  # how a subagent is re-created
        self._log = log
        # agent_id -> the current agent; restored ones have no handle until first use.
        self._agents: dict[str, ManagedAgent] = load_agent_records(store, run) if store is not None and stored_records else {}
        # Serialises every change: store write and event happen in one order.
        self._lock = asyncio.Lock()
        # agent_id -> the in-flight re-creation, shared by concurrent first uses.
        self._creating: dict[str, asyncio.Future[Any]] = {}
        self.creations = 0  # actors (re-)created by ensure(); for tests and statistics

    def payloads(self) -> list[dict[str, Any]]:
        """Every agent as a client payload, oldest first."""
        return [to_payload(a) for a in self._agents.values()]

    def get(self, agent_id: str) -> ManagedAgent | None:
        return self._agents.get(agent_id)

    async def change(
        self,
        agent_id: str,
        lifecycle: Lifecycle,
        *,
        kind: AgentKind | None = None,
        config: AgentConfig | None = None,
        handle: Any = None,
        last_error: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        """Move ``agent_id`` to ``lifecycle`` (creating it, as ``initializing``, if new).

        A new agent needs ``kind``; a new ``config`` replaces the old one. The record is
        durable before the ``agent_state`` event is published. Returns the payload.
        """
        if isinstance(config, dict):
            config = AgentConfig.model_validate(config)
        async with self._lock:
            current = self._agents.get(agent_id)
            steps: list[ManagedAgent] = []
            if current is None or (current.lifecycle == "closed" and lifecycle == "initializing"):
                if kind is None:
                    raise ValueError(f"agent {agent_id!r} is new to run {self._run!r}: pass its kind")
                current = new_agent(agent_id, run=self._run, kind=kind, config=config, title=title)
                steps.append(current)
            elif config is not None and config != current.config:
                current = current.model_copy(update={"config": config})
            if current.lifecycle != lifecycle:
                current = transition(current, lifecycle, handle=handle, last_error=last_error)
                steps.append(current)
            elif handle is not None and current.lifecycle in ("idle", "running", "error"):
                current = current.model_copy(update={"handle": handle})
            if not steps and current is not self._agents.get(agent_id):
                steps.append(current)
            for step in steps:
                await self._persist_then_publish(step)
            return to_payload(current)

    async def ensure(self, agent_id: str) -> Any:
        """The live handle of ``agent_id``, re-creating the actor from its record on first use."""
        agent = self._agents.get(agent_id)
        if agent is None:
            raise AgentNotFound(f"run {self._run!r} has no agent {agent_id!r}; known: {', '.join(self._agents) or 'none'}")
        handle = getattr(agent, "handle", None)
        if handle is not None and agent.lifecycle in ("idle", "running"):
            return handle
        if agent.lifecycle == "closed":
            raise AgentNotFound(f"agent {agent_id!r} of run {self._run!r} is closed; it is not re-created")
        pending = self._creating.get(agent_id)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._recreate(agent))
            self._creating[agent_id] = pending
            pending.add_done_callback(lambda _f: self._creating.pop(agent_id, None))
        return await asyncio.shield(pending)

    async def close_all(self) -> None:
        """Record every open agent as closed (the run is done with them)."""
        for agent_id, agent in list(self._agents.items()):
            if agent.lifecycle != "closed":
                await self.change(agent_id, "closed")

    async def _recreate(self, agent: ManagedAgent) -> Any:
        if agent.lifecycle != "initializing":
            await self.change(agent.agent_id, "initializing")
        try:
            handle = _create_actor(agent, self._caller, self._replica_factory)
        except Exception as exc:
            await self.change(agent.agent_id, "error", last_error=f"re-creation failed: {type(exc).__name__}: {exc}")
            raise
        self.creations += 1
        await self.change(agent.agent_id, "idle", handle=handle)
        self._log.info("re-created %s agent %s from its stored record", agent.kind, agent.agent_id, extra=_LOG)
        return handle

    async def _persist_then_publish(self, agent: ManagedAgent) -> None:
        if self._store is not None:
            record = to_stored_record(agent)
            store, run = self._store, self._run
            await self._io(lambda: store.put_agent(run, agent.agent_id, record))
        self._agents[agent.agent_id] = agent
        self._publish(to_payload(agent))


def _create_actor(agent: ManagedAgent, caller: Any, replica_factory: ReplicaFactory) -> Any:
    """A Ray actor for ``agent`` from its config: a named subagent replica (joined if it is
    still alive) or a coordinator actor hosting the pickled coordinator."""
    cfg = agent.config
    if agent.kind == "subagent":
        if cfg.skill is None or cfg.actor_name is None:
            raise ValueError(f"subagent {agent.agent_id!r} has no skill/actor_name in its record")
        if caller is None:
            raise ValueError(f"subagent {agent.agent_id!r}: the run has no ToolCaller to re-create it with")
        return replica_factory(caller, cfg.skill, name=cfg.actor_name, num_cpus=cfg.num_cpus or 0.0)
    blob = cfg.extra.get("coordinator")
    if not isinstance(blob, str):
        raise ValueError(f"coordinator {agent.agent_id!r} has no pickled coordinator in its record")
    return create_coordinator_actor(unpickled(blob))
