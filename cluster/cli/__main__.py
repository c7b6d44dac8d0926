"""``python -m cluster.cli``: the same as the ``soloist`` command."""

import sys

from cluster.cli.main import main

sys.exit(main())
