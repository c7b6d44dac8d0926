"""The single writer: the ``Orchestrator`` facade (``facade``) over its actor (``_actor``).

Also owns starting and finding that actor (``_launch``), durable recovery (``_recovery``),
the in-memory change log behind ``subscribe`` (``_change_log``), the ``Change`` record
(``changes``), the run's spec and statistics (``spec``) and the JSON round trip of states
(``_json_clean``). Public names are exported from ``actors``.
"""
