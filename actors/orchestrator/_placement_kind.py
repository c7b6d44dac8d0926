"""Where a run's process may live: bound to its creator's node, or free to move.

A run whose store is a file (SQLite) or that has no store is *node-bound*: its file is on
the node of the driver that created it, so its host (or dedicated actor) is pinned there, and
a soft placement would let Ray put it on a worker node whose removal takes the run with it
(and a restart elsewhere would not find the file). A run whose store is a database (a
``postgresql://`` URL) is reachable from every node: its process *may move*. It prefers the
creator's node (a soft affinity, so a driver decides where its runs start) and, when that node
is lost, Ray restarts it on a surviving one, where the run's next call activates it again from
the database with a new fencing epoch (the old activation can never commit again).

The two kinds never share a host: a host of movable runs holds nothing tied to its node.
"""

from __future__ import annotations

from typing import Any, Literal

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.storage import is_postgres_url

__all__ = ["Placement", "placement_of", "scheduling_strategy"]

Placement = Literal["node", "anywhere"]
"""``node``: pinned to the creating driver's node (a store file, or memory only).
``anywhere``: prefers that node and moves to another when it is lost (a database store)."""


def placement_of(store: Any) -> Placement:
    """The placement of a run stored at ``store`` (a path, a URL, a store object or None).
    A store *object* stays node-bound: it lives in the process that holds it."""
    return "anywhere" if is_postgres_url(store) else "node"


def scheduling_strategy(placement: Placement, *, node: str | None = None) -> NodeAffinitySchedulingStrategy:
    """Ray's strategy for a run process started from this process: ``node`` (default: this
    process's node), pinned for ``node`` placement, preferred for ``anywhere`` (also on
    restart: a lost node is passed over)."""
    return NodeAffinitySchedulingStrategy(node or ray.get_runtime_context().get_node_id(), soft=placement == "anywhere")
