"""``python -m benchmarks``: run the benchmarks (``soloist bench`` runs this from the source checkout)."""

import sys

from benchmarks.command import main

sys.exit(main())
