"""Children that a test interrupts with SIGINT, as a user does with Ctrl-C at a terminal."""

from __future__ import annotations

import signal


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child the test will send SIGINT: the child gets SIGINT's default
    disposition. A suite started in the background (``cmd &`` in a script, some CI runners)
    inherits SIGINT *ignored*, a child inherits that too, and Ctrl-C then does nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
