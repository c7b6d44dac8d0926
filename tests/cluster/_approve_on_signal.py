"""``soloist approve`` started on cue, for the race test: connects this process to its own
embedded Ray first (slow, and different for each process), prints ``READY``, waits for the
GO file, then runs ``soloist approve ARGS...`` in this process and exits with its code.
Usage: ``python _approve_on_signal.py GO_FILE ARGS...``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cluster import connect
from cluster.cli import main

if __name__ == "__main__":
    go, args = Path(sys.argv[1]), sys.argv[2:]
    connect(code_from_cwd=False)  # what `soloist approve` does first; connect() is idempotent after
    print("READY", flush=True)
    while not go.exists():
        time.sleep(0.001)
    sys.exit(main(["approve", *args]))
