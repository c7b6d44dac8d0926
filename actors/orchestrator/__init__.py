"""The single writer: the ``Orchestrator`` facade (``facade``) over its writer (``_actor``).

A handle is built by ``_building`` (a new run's checked spec, what ``attach`` finds) and calls
its run's writer through ``_calls`` with the commands of ``_commands`` (one class per writer
operation); the writer is a dedicated actor (started and found by ``_launch``) or a run on a
shared run host (``_host``, placed by ``_placement``). ``core`` drives the same writer in
process (``RunCore``); ``_activation`` is an activation's lifecycle. Also here: durable
recovery (``_recovery``), the in-memory change log behind ``subscribe`` (``_change_log``),
the ``Change`` record (``changes``), the run's spec and statistics (``spec``) and the JSON
round trip of states (``_json_clean``). Public names are exported from ``actors``.
"""
