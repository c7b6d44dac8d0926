"""Shared fixtures: one embedded Ray for the whole session.

Pure tests (tests/coordinators) never touch Ray. Tests that need a cluster ask for the
``ray_session`` fixture (``ray_module`` for module-scoped fixtures); it starts Ray once and
shuts it down after the last test. Multi-node modules stop it and build their own
``ray.cluster_utils.Cluster``; the next test that asks for ``ray_session`` starts it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

_OBJECT_STORE_BYTES = 300 * 1024 * 1024


def _start_session_ray() -> None:
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # never join a cluster another test or process left running
            num_cpus=4,
            include_dashboard=False,
            object_store_memory=_OBJECT_STORE_BYTES,
            log_to_driver=True,
            namespace="soloist-tests",
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Pickle test modules by value, so test-defined models and functions reach Ray workers."""
    import sys

    import cloudpickle

    for name, module in list(sys.modules.items()):
        if name == "tests" or name.startswith("tests."):
            cloudpickle.register_pickle_by_value(module)


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
