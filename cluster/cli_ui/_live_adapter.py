"""Live runs for runtimes without ``Orchestrator.list_live``: the named orchestrator actors."""

from __future__ import annotations

import ray

from actors.orchestrator import actor_name
from cluster.connect import SOLOIST_NAMESPACE

__all__ = ["named_orchestrators"]


def named_orchestrators() -> list[str]:
    """Run names of the orchestrator actors alive in soloist's namespace (blocking)."""
    prefix = actor_name("")
    return [entry["name"][len(prefix):] for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry.get("namespace") == SOLOIST_NAMESPACE and entry["name"].startswith(prefix)]
