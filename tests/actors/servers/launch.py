"""Start the test MCP server over stdio (as an ``McpServer`` spec) or over HTTP on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """The test server as a subprocess serving streamable HTTP on 127.0.0.1:``port``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = HANG_GUARD_S) -> "HttpServer":
        """Start it and wait until it listens (a Python start-up: slow when the cores are busy)."""
        self.proc = subprocess.Popen([sys.executable, SERVER_SCRIPT, "--http", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the test MCP server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)  # polling for the port to open, not an assertion
        self.kill()
        raise RuntimeError(f"the test MCP server did not listen on {self.port} within {timeout}s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def spec(self, name: str = "remote", prefix: str = "") -> McpServer:
        return McpServer.http(name, self.url, prefix=prefix)
