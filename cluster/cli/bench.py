"""``soloist bench``: run ``python -m benchmarks`` from soloist's source checkout.

The benchmark code (the ``benchmarks`` package) is not part of the installed wheel: it lives
beside ``cluster/`` in a checkout of the repository. This command finds it there and runs it
with this Python, passing every argument on (``soloist bench --help`` lists them); without a
checkout it says so and exits 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

__all__ = ["add_bench_command", "run_bench", "source_checkout"]

EXIT_USAGE = 2


def source_checkout() -> Path | None:
    """The source checkout this ``cluster`` package belongs to, when it has the benchmarks."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "benchmarks" / "__main__.py").is_file() else None


def add_bench_command(subparsers: Any) -> None:
    """List ``soloist bench`` among the subcommands; ``main`` hands its arguments to ``run_bench``."""
    subparsers.add_parser(
        "bench", add_help=False, help="measure throughput and scaling against raw Ray and LangGraph (python -m benchmarks)",
        description="Runs `python -m benchmarks ARGS` from soloist's source checkout; `soloist bench --help` lists ARGS.",
    )


def run_bench(args: Sequence[str], err: Console) -> int:
    """``python -m benchmarks ARGS`` with this interpreter, the checkout first on the path; its exit code."""
    checkout = source_checkout()
    if checkout is None:
        err.print("[red]soloist bench: the benchmarks package is not importable here: it is not installed with soloist, "
                  "it lives in the source checkout (benchmarks/ beside cluster/). Clone the repository, install it "
                  "(pip install -e '.[bench]') and run `soloist bench` or `python -m benchmarks` there.[/]")
        return EXIT_USAGE
    path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], env={**os.environ, "PYTHONPATH": path}).returncode
