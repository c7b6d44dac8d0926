"""How a handle calls its run's writer: one command, and the retries around it.

A run's writer is either a dedicated actor (a Ray actor handle of ``OrchestratorActor``,
whose ``serve`` runs a command) or a hosted run (``HostedActor``, which sends the command to
the run's host). Either way a call is one ``Command`` of ``_commands``: its value comes back,
or the writer's own error as itself (not wrapped by Ray); a durable run's writer that is
restarting is waited for (writes carry request ids, so a resend is exactly-once), and a host
that ended is found again under its name.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import ray

from actors.exceptions import OrchestratorClosed
from actors.orchestrator._commands import Command, Version
from actors.orchestrator._launch import translate_creation_error
from actors.orchestrator._placement import HostedActor
from cluster.connect import wait_ref

__all__ = ["call_writer", "send", "wait_ready"]

R = TypeVar("R")

_UNAVAILABLE_RETRY_SECONDS = 120.0


def send(actor: Any, command: Command[Any]) -> Any:
    """``command`` to the run's writer (a hosted run's, or its dedicated actor's
    ``OrchestratorActor.serve``) as one Ray call, not awaited: an ``ObjectRef``."""
    return actor.send(command) if isinstance(actor, HostedActor) else actor.serve.remote(command)


def wait_ready(actor: Any, name: str) -> None:
    """Wait until a dedicated actor has started (its creation's error, unwrapped, if it failed)."""
    try:
        wait_ref(send(actor, Version()))
    except ray.exceptions.RayError as exc:
        raise translate_creation_error(exc, name) from None


async def call_writer(actor: Any, command: Command[R], *, durable: bool, name: str) -> R:
    """Run ``command`` on the writer of run ``name``; actor-side errors arrive as their own
    type, a restart of a ``durable`` run's writer is retried."""
    deadline = asyncio.get_running_loop().time() + _UNAVAILABLE_RETRY_SECONDS
    delay = 0.05
    while True:
        try:
            if isinstance(actor, HostedActor):
                return await actor.call(command)
            return await actor.serve.remote(command)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else None
            if cause is None:
                raise
            raise cause from None
        except ray.exceptions.ActorUnavailableError:
            # Restarting: writes carry request ids, so resending is exactly-once.
            if not durable or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        except ray.exceptions.ActorDiedError as exc:
            if isinstance(actor, HostedActor) and asyncio.get_running_loop().time() < deadline:
                # The host ended (it retired, or its node was lost): the same name gives
                # a new one, which activates a durable run from its store.
                actor.forget_host()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            raise OrchestratorClosed(f"orchestrator {name!r} is not running: {exc.error_msg if hasattr(exc, 'error_msg') else exc}") from exc
