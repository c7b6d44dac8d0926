"""Handoffs: ``Call``/``Result``/``handoff``/``parallel_handoff`` (``api``), the frozen
``HandoffSettings`` a run hands out (``settings``), this process's warm semaphore permits
(``_permits``) and the subagent pools that run the calls (``pools``). Public names are
exported from ``actors``.
"""
