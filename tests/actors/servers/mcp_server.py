"""A small MCP server written with the SDK, for the McpToolCaller tests.

Run as ``python mcp_server.py`` (stdio) or ``python mcp_server.py --http PORT`` (streamable
HTTP on 127.0.0.1; port 0 takes a free one), which prints ``READY <port>`` once the port
listens. Tools: ``add`` (typed round trip), ``fail`` (a tool error), ``slow``
(sleeps, then answers this process's pid), ``pid``, and ``work`` (sleeps while counted in a
``FilePeak`` file, to measure in-flight work where it runs; optionally held at its gate).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import uvicorn
from pydantic import BaseModel

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from filepeak import FilePeak  # noqa: E402

server = MCPServer("soloist-test", log_level="ERROR")


class Sum(BaseModel):
    sum: int
    server_pid: int


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return Sum(sum=a + b, server_pid=os.getpid())


@server.tool()
def fail(reason: str) -> str:
    """Always fails with ``reason``."""
    raise ToolError(f"refused: {reason}")


@server.tool()
async def slow(seconds: float) -> int:
    """Sleep ``seconds``, then answer this server's pid."""
    await asyncio.sleep(seconds)
    return os.getpid()


@server.tool()
def pid() -> int:
    """This server's pid."""
    return os.getpid()


class Worked(BaseModel):
    tag: int
    where: str


@server.tool()
async def work(counter: str, seconds: float, tag: int, gate: bool = False) -> Worked:
    """Sleep ``seconds`` while counted in the ``FilePeak`` file ``counter`` (after its gate opens, if ``gate``)."""
    peak = FilePeak(counter)
    peak.enter()
    try:
        if gate:
            await peak.gate()
        await asyncio.sleep(seconds)
    finally:
        peak.exit()
    return Worked(tag=tag, where="mcp")


def serve_http(port: int) -> None:
    """Listen first, then say where (``READY <port>``), then serve: a client that connects
    once the line is out waits in the listen backlog until the app answers, never finds the
    port closed. The launcher waits for that line instead of polling the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart takes its port back at once
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    print(f"READY {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), log_level="error")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        server.run()
