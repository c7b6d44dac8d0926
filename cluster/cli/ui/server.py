"""``UiServer``: the page server on a socket of its own, in the foreground or a thread.

The socket is bound before the server starts, so the real port (also for ``port=0``) is
known to the Host/Origin guard and to whoever prints the URL.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.parse
from typing import Any

import uvicorn

from cluster.cli.ui.app import create_app
from cluster.cli.ui.security import Guard, check_bind
from cluster.cli.ui.source import RunSource

__all__ = ["UiServer", "DEFAULT_PORT"]

#: The page's default port (Ray's dashboard keeps 8265).
DEFAULT_PORT = 8470


class UiServer:
    """Serves the runs page for ``source`` on ``host:port`` (``port=0``: any free port).

    A host other than loopback raises ``UnsafeBind`` unless ``public_ok``; then ``warning``
    holds the text to print. With ``allow_actions``, ``token`` is the action token (from
    ``token=``, else ``$SOLOIST_UI_TOKEN``, else random).
    """

    def __init__(self, source: RunSource, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 allow_actions: bool = False, token: str | None = None, public_ok: bool = False) -> None:
        self.warning = check_bind(host, public_ok=public_ok)
        self.source = source
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host.strip("[]"), port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port") from None
        self._sock.listen(128)  # connections wait in the backlog until the server runs
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self.guard = Guard(host=host, port=self.port, allow_actions=allow_actions, token=token)
        self.app = create_app(source, self.guard)
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                                access_log=False)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def token(self) -> str | None:
        return self.guard.token

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{host}:{self.port}/"

    def run_url(self, name: str) -> str:
        """The page of one run."""
        return f"{self.url}run?{urllib.parse.urlencode({'name': name})}"

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self, timeout: float = 30.0) -> "UiServer":
        """Serve from a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
                                        name="soloist-ui", daemon=True)
        self._thread.start()
        pause = threading.Event()
        waited = 0.0
        while not self._server.started and self._thread.is_alive() and waited < timeout:
            pause.wait(0.02)
            waited += 0.02
        if not self._server.started:
            self.close()
            raise RuntimeError(f"the page server did not start within {timeout:.0f}s (see the log above)")
        return self

    def close(self) -> None:
        self.app.stop_streams()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._sock.close()

    def __enter__(self) -> "UiServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<UiServer {self.url} actions={'on' if self.guard.allow_actions else 'off'}>"
