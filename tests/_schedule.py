"""The order in which ``scripts/test`` hands test modules to its two processes: longest first.

``scripts/test`` loads this module as a pytest plugin (``-p tests._schedule``). With
``--dist loadfile`` pytest-xdist gives each process one whole module at a time, and by
default it orders the modules by their number of tests, most first. In this suite the slow
modules are those with one to three long tests (mypy, a crash test, a multi-node cluster),
so they came last, and the run ended with one process still inside a long module while the
other had nothing left to do; the multi-node modules, which stop the session's Ray for a
cluster of their own, also came between other modules, and each module after one started the
session's Ray again.

Here the modules are ordered as ``tests/conftest.py`` groups them (the modules on the session's
Ray, then the benchmarks, then those on ``multinode_cluster``), and within a group longest
first, from ``MODULE_SECONDS``: what each module took in one process of a two-process run on
the 2-core CI machine. The table only orders: a module missing from it (counted a test at
``SECONDS_PER_RAY_TEST`` when the test uses a Ray or PostgreSQL fixture, ``SECONDS_PER_TEST``
otherwise) or a figure gone stale costs balance, never a test.
"""

from __future__ import annotations

import pytest

__all__ = ["MODULE_SECONDS", "SECONDS_PER_RAY_TEST", "SECONDS_PER_TEST", "module_weight"]

#: Seconds a module took (setup, calls and teardown of all its tests), CI logs of 2026-12-07
#: and the single-module runs of 2026-12-08; modules of a few seconds are left out.
MODULE_SECONDS: dict[str, float] = {
    "tests/benchmarks/test_bench_quick.py": 110,
    "tests/actors/test_pool_scaling.py": 60,
    "tests/actors/test_pool_retirement.py": 60,
    "tests/cluster/test_storage_contract.py": 50,
    "tests/actors/test_durable_crash.py": 45,
    "tests/actors/test_mcp_handoff.py": 45,
    "tests/reliability/test_failover_postgres.py": 45,
    "tests/test_types.py": 30,
    "tests/actors/test_pool_scaling_multinode.py": 39,
    "tests/actors/test_mcp_real_servers.py": 38,
    "tests/examples/test_examples.py": 25,
    "tests/cluster/test_cli_single_writer.py": 35,
    "tests/cluster/test_local_cluster.py": 25,
    "tests/cluster/test_cli.py": 30,
    "tests/reliability/test_lost_subagent_permit.py": 33,
    "tests/reliability/test_faults_multinode.py": 31,
    "tests/cluster/ui/test_ui_command.py": 30,
    "tests/test_readme.py": 27,
    "tests/actors/test_pool_policy.py": 15,
    "tests/reliability/test_security.py": 26,
    "tests/reliability/test_load.py": 33,
    "tests/actors/test_event_loops.py": 25,
    "tests/cluster/test_metrics_multinode.py": 25,
    "tests/actors/test_pool_users.py": 25,
    "tests/pydantic_ai/test_approvals.py": 29,
    "tests/pydantic_ai/test_journal_size.py": 27,
    "tests/test_docs.py": 25,
    "tests/reliability/test_cap_fairness.py": 21,
    "tests/actors/test_orchestrator.py": 21,
    "tests/reliability/test_semaphore_service.py": 21,
    "tests/actors/test_tracing_without_otel.py": 20,
    "tests/actors/test_run_hosts_multinode.py": 18,
    "tests/actors/test_durable_orchestrator.py": 15,
    "tests/actors/test_run_resume_crash.py": 15,
    "tests/actors/test_registry_pool_key.py": 14,
    "tests/reliability/test_bad_input.py": 14,
    "tests/cluster/ui/test_runs_paging.py": 14,
    "tests/actors/test_run_hosts.py": 14,
    "tests/actors/test_handoff_multinode.py": 13,
    "tests/cluster/test_replica_budget.py": 12,
    "tests/actors/test_run_cancel.py": 11,
    "tests/actors/test_run_batch_crash.py": 11,
    "tests/reliability/test_pool_retirement.py": 9,
    "tests/cluster/ui/test_pool_status.py": 8,
}

#: The weight of a module missing from ``MODULE_SECONDS``, a test on a Ray (or a PostgreSQL
#: server) of the suite's, and a test of anything else (pure code, a quick subprocess).
SECONDS_PER_RAY_TEST = 1.5
SECONDS_PER_TEST = 0.1

_SERVER_FIXTURES = frozenset({"ray_session", "ray_module", "multinode_cluster", "postgres_server"})


def module_weight(module: str, items: list[pytest.Item]) -> float:
    """How long ``module`` (its path from the repository root), with these tests, is expected to take."""
    if module in MODULE_SECONDS:
        return MODULE_SECONDS[module]
    return sum(SECONDS_PER_RAY_TEST if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) else SECONDS_PER_TEST
               for item in items)


def _group(item: pytest.Item) -> int:
    """``tests/conftest.py``'s rank of an item: 0 on the session's Ray, 1 multinode (the
    benchmarks, which use the session's Ray first), 2 on ``multinode_cluster``."""
    if "multinode_cluster" in getattr(item, "fixturenames", ()):
        return 2
    return 1 if item.get_closest_marker("multinode") is not None else 0


def pytest_configure(config: pytest.Config) -> None:
    # Keep the order below: xdist's default re-sorts the modules by their number of tests.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after tests/conftest.py's own grouping
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    key = {module: (max(_group(i) for i in its), -module_weight(module, its)) for module, its in modules.items()}
    items.sort(key=lambda item: key[item.nodeid.split("::", 1)[0]])  # stable: a module's tests keep their order
