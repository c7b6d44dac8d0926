"""Where a hosted durable run is stored, so that a host can activate it again (``Reload``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from actors.orchestrator.spec import RunSpec

__all__ = ["Reload", "reload_of"]


class Reload(BaseModel):
    """Where a durable run is stored: sent when a hosted run is opened and again with a call
    its host answered ``RunNotHeld``, so the host can activate it again (after unloading it,
    or after Ray restarted the host)."""

    model_config = ConfigDict(frozen=True)

    store: str
    durability: str
    unload_after_s: float | None = None
    """Idle seconds before the run is unloaded (None: the host's default)."""
    owner_job: str | None = None
    """The job whose end closes the run (None: detached), kept across a restart of its host."""
    named: bool = True
    reopen: bool = False
    """An explicit reopen (``Orchestrator.attach`` with the store): activates a run its owner
    closed. Without it, a closed run stays closed whoever's copy of a handle calls it."""


def reload_of(spec: RunSpec, owner_job: str | None = None) -> Reload | None:
    """How a host activates ``spec``'s run again: None for a run without a store file."""
    if not isinstance(spec.store, str):
        return None
    return Reload(store=spec.store, durability=spec.durability, unload_after_s=spec.unload_after_s, owner_job=owner_job,
                  named=spec.named)
