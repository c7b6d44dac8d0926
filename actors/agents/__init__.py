"""Managed agents: the ``ManagedAgent`` lifecycle and its projections (``managed``), the
orchestrator-side registry of a run's agents (``registry``) and the actor that hosts a pure
coordinator (``coordinator_host``). Public names are exported from ``actors``.
"""
