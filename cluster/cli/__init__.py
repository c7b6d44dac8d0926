"""The ``soloist`` command line: the application shell on top of ``actors``.

The only part of ``cluster`` that imports ``actors`` and the built-in exploration:
``main`` (argument parsing and dispatch), ``explore`` (the built-in exploration job),
``report`` and ``status`` (rendering), ``bench`` (runs ``python -m benchmarks`` from the
source checkout), and
``stdout_reserved`` (stdout kept for one JSON document, everything else moved to stderr).
"""

from cluster.cli.json_stdout import stdout_reserved
from cluster.cli.explore import code_skill_registry, explore
from cluster.cli.main import build_parser, main
from cluster.cli.status import StatusReport, collect_status, render_status

__all__ = ["main", "build_parser", "explore", "code_skill_registry", "collect_status", "stdout_reserved",
           "StatusReport", "render_status"]
