"""``soloist approve`` started on cue, for the race test.

Each process connects to its own embedded Ray (slow, and different for each process) and
opens the run the way ``soloist approve`` does (``Orchestrator.attach(name, store=...)``),
so both answers are computed on a loaded run: the worst interleaving of two overlapping
commands. Once ready it prints ``READY``, waits for the GO file, then runs ``soloist approve
ARGS...`` in this process (which finds the run this process opened) and exits with its code.
Usage: ``python _approve_on_signal.py GO_FILE RUN ID --store PATH``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from actors import Orchestrator
from cluster import connect
from cluster.cli import main
from cluster.storage import StoreError

if __name__ == "__main__":
    go, args = Path(sys.argv[1]), sys.argv[2:]
    connect(code_from_cwd=False)  # what `soloist approve` does first; connect() is idempotent after
    try:
        opened = Orchestrator.attach(args[0], store=args[args.index("--store") + 1])
    except StoreError as exc:  # RunLockedElsewhere: the other process opened it first; its command decides
        print(f"not opened here: {exc}", file=sys.stderr, flush=True)
    print("READY", flush=True)
    while not go.exists():
        time.sleep(0.001)
    sys.exit(main(["approve", *args]))
