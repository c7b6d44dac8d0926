"""The run hosts of the connected cluster, as ``soloist status`` and the runs page read them.

A run's host is one of a few named actors (``run_host_name(run, store=...)`` names it); each
holds many runs' orchestrators, loaded or unloaded (see ``actors.orchestrator._host``).
"""

from __future__ import annotations

from typing import Any

import ray

from actors.orchestrator._host import HostedRunRecord, HostStatistics
from actors.orchestrator._placement import host_name_for, live_host_names
from cluster.connect import SOLOIST_NAMESPACE, wait_ref

__all__ = ["HostStatistics", "HostedRunRecord", "run_host_name", "live_hosts", "host_statistics", "hosted_runs"]


def run_host_name(run: str, store: Any = None) -> str:
    """The Ray name (in the ``soloist`` namespace) of the host actor that holds ``run`` when
    it is not dedicated, when this process places it: a stable hash of the run's name over the
    cluster's ``SOLOIST_RUN_HOSTS`` hosts of the run's placement kind. A run stored in a
    database (``store`` a ``postgresql://`` URL) has hosts that move between nodes
    (``soloist:host:db:<i>``); any other run (a store file, memory only: ``store`` None) one
    pinned to this process's node, where its file is (``soloist:host:<node id>:<i>``)."""
    return host_name_for(run, store=store)


def live_hosts() -> list[str]:
    """The names of the host actors alive on the connected cluster, sorted."""
    return sorted(live_host_names())


def host_statistics() -> list[HostStatistics]:
    """Every live host's report (a host that ends meanwhile is left out)."""
    found = []
    for name in live_hosts():
        try:
            handle = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
            found.append(wait_ref(handle.statistics.remote(), timeout=30))
        except (ValueError, ray.exceptions.RayActorError):
            continue
    return found


def hosted_runs(offset: int = 0, limit: int | None = None) -> list[tuple[str, HostedRunRecord]]:
    """The runs of every live host, as ``(host, record)``, by host then run name; ``offset``
    and ``limit`` page each host's list (a host holds thousands)."""
    found: list[tuple[str, HostedRunRecord]] = []
    for name in live_hosts():
        try:
            handle = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
            found.extend((name, record) for record in wait_ref(handle.runs.remote(offset, limit), timeout=60))
        except (ValueError, ray.exceptions.RayActorError):
            continue
    return found
