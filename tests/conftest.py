"""Shared fixtures: one embedded Ray for the whole session.

Pure tests (tests/coordinators) never touch Ray. Tests that need a cluster ask for the
``ray_session`` fixture (``ray_module`` for module-scoped fixtures); it starts Ray once and
shuts it down after the last test. Multi-node modules stop it and build their own
``ray.cluster_utils.Cluster``; they run last (``pytest_collection_modifyitems``), so no test
after them has to start the session's Ray again.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray starts its workers at nice 15, to leave the cores to its own raylet: beside other work
# at nice 0 (both cores busy with someone else's loops) they would get about 3% of a core
# and the suite would crawl for hours. The suite's workers, and those of the Ray instances
# its subprocesses start, compete on equal terms with the rest of the machine.
os.environ.setdefault("RAY_worker_niceness", "0")
# A worker has 60 s to register with its raylet by default; when both cores are busy with
# other work a Python start-up (imports of ray, pydantic, the skill's module) can take longer,
# and the raylet then kills the worker and fails the task or actor it was started for.
os.environ.setdefault("RAY_worker_register_timeout_seconds", "300")
# `soloist run` joins the cluster a user started with `soloist up` (recorded under
# SOLOIST_HOME): tests, and the commands they start, must never find a user's cluster.
if "SOLOIST_HOME" not in os.environ:
    import tempfile

    os.environ["SOLOIST_HOME"] = tempfile.mkdtemp(prefix="soloist-home-tests-")

_T = TypeVar("_T")

_OBJECT_STORE_BYTES = 300 * 1024 * 1024

_STARTUP_ATTEMPTS = 3


def _start_with_retry(start: Callable[[], _T], undo: Callable[[], None]) -> _T:
    """Start Ray processes, again if Ray gave up waiting for its raylet to register.

    Ray allows a node a fixed 30 s to come up; on a machine whose cores are all busy it can
    take longer. That is a clock inside Ray, not a failure of the code under test.
    """
    for attempt in range(1, _STARTUP_ATTEMPTS + 1):
        try:
            return start()
        except Exception as exc:  # Ray raises a plain Exception for this one case
            if "timed out during startup" not in str(exc) or attempt == _STARTUP_ATTEMPTS:
                raise
            warnings.warn(f"Ray startup attempt {attempt} timed out on a busy machine; retrying", stacklevel=2)
            undo()
    raise AssertionError("unreachable")


def _start_session_ray() -> None:
    import ray

    if not ray.is_initialized():
        _start_with_retry(lambda: ray.init(
            address="local",  # never join a cluster another test or process left running
            num_cpus=4,
            include_dashboard=False,
            object_store_memory=_OBJECT_STORE_BYTES,
            log_to_driver=True,
            namespace="soloist-tests",
        ), ray.shutdown)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the multi-node modules last (each module whole, otherwise in collection order):
    each stops the session's Ray for a cluster of its own, so no test after one has to start
    the session's Ray again. Those that still use the session's Ray first (the benchmarks
    module: its scaling measure replaces it), then those on ``multinode_cluster``."""
    rank: dict[object, int] = {}
    for item in items:
        module = getattr(item, "module", None)
        if "multinode_cluster" in getattr(item, "fixturenames", ()):
            rank[module] = 2
        elif item.get_closest_marker("multinode") is not None:
            rank[module] = max(rank.get(module, 0), 1)
    items.sort(key=lambda item: rank.get(getattr(item, "module", None), 0))  # stable


def pytest_collection_finish(session: pytest.Session) -> None:
    """Pickle test modules by value, so test-defined models and functions reach Ray workers."""
    import sys

    import cloudpickle

    for name, module in list(sys.modules.items()):
        if name == "tests" or name.startswith("tests."):
            cloudpickle.register_pickle_by_value(module)


@pytest.fixture(autouse=True)
def _restore_soloist_loggers() -> Iterator[None]:
    """Undo what an in-process ``soloist`` command (``configure_logging``) did to our loggers,
    so later tests' log capture still sees their records."""
    import logging

    loggers = [logging.getLogger(name) for name in ("soloist", "actors", "cluster", "coordinators")]
    saved = [(lg.handlers[:], lg.propagate, lg.level) for lg in loggers]
    yield
    for lg, (handlers, propagate, level) in zip(loggers, saved):
        lg.handlers[:] = handlers
        lg.propagate = propagate
        lg.setLevel(level)


@pytest.fixture(scope="session")
def _ray_teardown() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_session(_ray_teardown: None) -> None:
    """The session's embedded Ray: started on first use, reused after, shut down at the end.

    Restarted if a multi-node test module shut it down to run its own ``Cluster``.
    """
    _start_session_ray()


@pytest.fixture(scope="module")
def ray_module(_ray_teardown: None) -> None:
    """``ray_session`` for module-scoped fixtures."""
    _start_session_ray()


_NODE_OBJECT_STORE_BYTES = 100 * 1024 * 1024


#: Each node of ``multinode_cluster`` has a "disk" of its own: this variable names a directory
#: of that node's (in its processes' environment), so one store path such as
#: ``$SOLOIST_TEST_NODE_DISK/runs.sqlite`` is a different file on each node, as on real machines.
NODE_DISK_VARIABLE = "SOLOIST_TEST_NODE_DISK"


def _start_multinode(disks: list[str]) -> Any:
    """A head (2 CPUs, no dashboard) and two 1-CPU worker nodes, node ``i``'s disk ``disks[i]``;
    on a failed start, every node that did start is shut down before the error propagates (so a
    retry starts clean)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    try:
        cluster.add_node(num_cpus=2, object_store_memory=_NODE_OBJECT_STORE_BYTES, include_dashboard=False,
                         env_vars={NODE_DISK_VARIABLE: disks[0]})
        for disk in disks[1:]:
            cluster.add_node(num_cpus=1, object_store_memory=_NODE_OBJECT_STORE_BYTES, env_vars={NODE_DISK_VARIABLE: disk})
    except Exception:
        cluster.shutdown()
        raise
    return cluster


@pytest.fixture(scope="module")
def multinode_cluster(_ray_teardown: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A head (2 CPUs) and two worker nodes (1 CPU each): three raylets on this machine.

    Replaces the session's Ray for the module (the next ``ray_session`` starts it again) and
    shuts every node down afterwards. A node Ray gave up on after its fixed 30 s (a busy
    machine) is started again, as the session's Ray is. Each node has a disk of its own
    (``NODE_DISK_VARIABLE``; ``cluster.disks``, the head's first, which is also this driver's).
    """
    import ray

    if ray.is_initialized():
        ray.shutdown()
    base = tmp_path_factory.mktemp("node-disks")
    disks = [str(base / f"node-{i}") for i in range(3)]
    for disk in disks:
        os.makedirs(disk)
    cluster = _start_with_retry(lambda: _start_multinode(disks), lambda: None)
    cluster.disks = disks
    before = os.environ.get(NODE_DISK_VARIABLE)
    os.environ[NODE_DISK_VARIABLE] = disks[0]  # this driver runs on the head node
    ray.init(address=cluster.address, namespace="soloist-tests")
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if before is None:
            os.environ.pop(NODE_DISK_VARIABLE, None)
        else:
            os.environ[NODE_DISK_VARIABLE] = before


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """The session's PostgreSQL server: ``SOLOIST_TEST_POSTGRES_URL``'s, or a throw-away one
    (``tests/_postgres.py``) started on first use and deleted after the last test."""
    from tests._postgres import shared_server

    server = shared_server()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="module")
def own_server() -> Iterator[Any]:
    """A throw-away PostgreSQL server of the module's own, for tests that stop it the hard way
    (``pg_ctl stop -m immediate``) and start it again: the session's server stays untouched."""
    from tests._postgres import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.destroy()
