"""The ``soloist`` command line: the application shell on top of ``actors``.

The only part of ``cluster`` that imports ``actors`` and the built-in exploration:
``main`` (argument parsing and dispatch), ``explore`` (the built-in exploration job),
``report`` and ``status`` (rendering), ``bench`` (the benchmark command).
"""

from cluster.cli.bench import render_table, write_outputs
from cluster.cli.explore import code_skill_registry, explore
from cluster.cli.main import build_parser, main
from cluster.cli.status import collect_status

__all__ = ["main", "build_parser", "explore", "code_skill_registry", "collect_status", "render_table", "write_outputs"]
