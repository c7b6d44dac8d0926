"""Start the test MCP server over stdio (as an ``McpServer`` spec) or over HTTP on loopback."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from typing import Any

from actors import McpServer, McpToolCaller
from tests._waits import HANG_GUARD_S

SERVER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_server.py")


def stdio_server(name: str = "local", prefix: str = "") -> McpServer:
    """The test server as a stdio command (each connecting process spawns its own)."""
    return McpServer.stdio(name, sys.executable, SERVER_SCRIPT, prefix=prefix)


def mcp_caller(*servers: McpServer, **options: Any) -> McpToolCaller:
    """An ``McpToolCaller`` for the tests: a server's start (a Python start-up) may take a busy
    machine longer than the default ``connect_timeout``, so it is the hang guard unless set."""
    options.setdefault("connect_timeout", HANG_GUARD_S)
    return McpToolCaller(*servers, **options)


class HttpServer:
    """The test server as a subprocess serving streamable HTTP on 127.0.0.1:``port``.

    ``port`` None takes a free one at the first start (the server binds port 0 and says which
    it got); a restart listens on the same port again, so clients reconnect to the same URL.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the test MCP server has no port before its first start()")
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = HANG_GUARD_S) -> "HttpServer":
        """Start it and wait for its ``READY <port>`` line (it listens from then on); a start-up
        is a Python import of the SDK, slow when the cores are busy."""
        self.proc = subprocess.Popen([sys.executable, SERVER_SCRIPT, "--http", str(self.port or 0)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = _first_line(self.proc, timeout)
        if not line.startswith("READY "):
            exited = self.proc.poll()
            self.kill()
            raise RuntimeError(f"the test MCP server did not report READY within {timeout:g}s "
                               f"(exit code {exited}, first line {line!r})")
        self.port = int(line.split()[1])
        return self

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self.proc = None

    def spec(self, name: str = "remote", prefix: str = "") -> McpServer:
        return McpServer.http(name, self.url, prefix=prefix)


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line ``proc`` prints: waits for the line itself (or end of output, when it
    exits), with ``timeout`` as the hang guard. Empty if neither came in time."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if ready else ""
