"""The per-process registry declares every process-wide table; none is looked up by a string."""

from __future__ import annotations

from cluster import ProcessRegistry, process_registry


def test_every_process_wide_table_is_a_declared_attribute_with_one_statistics_entry():
    registry = ProcessRegistry()
    assert set(registry.statistics().tables) == {
        "handoffs.warm_permits", "handoffs.subagent_pools", "handoffs.pool_trackers", "handoffs.caller_keys",
        "callers.mcp_sessions", "callers.nested_runs", "semaphore.heartbeats", "semaphore.services", "metrics.collector",
        "ui.stores", "replicas.budget", "orchestrator.run_hosts", "orchestrator.shared_settings",
    }
    assert not hasattr(registry, "table") and not hasattr(registry, "weak_id_map")  # no tables made up by name


def test_one_registry_per_process():
    assert process_registry() is process_registry()
    assert process_registry().ui_stores is process_registry().ui_stores
