"""``McpToolCaller``: the tools of MCP servers behind the ``ToolCaller`` surface.

Built on the official ``mcp`` SDK. A server is reached over stdio (a command this process
spawns) or streamable HTTP (a URL). The caller itself holds only configuration, so it
pickles into subagent actors; each process connects lazily on its first call and keeps
one session per server (per event loop), shared by every concurrent call it serves. The
tools of one server share one subagent pool, so a server has one session (a stdio server:
one process) per replica of that pool, not one per tool.

Failure model: a tool that answers ``isError`` is a tool error (``is_error``). A server
that dies mid-call fails the calls it was serving with ``McpServerGone`` and the session
is dropped, so the next call reconnects (a restarted server is used again); a server that
does not answer within ``call_timeout`` fails that call with ``McpCallTimeout``. Either
way the item errors and the rest of a batch completes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.callers.protocol import TextContent, ToolCallResult
from actors.exceptions import McpCallTimeout, McpError, McpServerGone
from cluster.process import Table, process_registry

__all__ = ["McpServer", "McpTool", "McpToolCaller", "close_mcp_sessions"]

_log = logging.getLogger(__name__)
_EXTRA = {"component": "mcp-caller"}
_CONNECTION_CLOSED = -32000  # the SDK's error code when the transport closed under a request


class McpServer(BaseModel):
    """One MCP server: a stdio ``command`` (argv) or a streamable-HTTP ``url``.

    ``prefix`` is prepended to the server's tool names (``"fs."`` -> ``"fs.read"``), so two
    servers exposing the same tool name can sit behind one caller.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    command: tuple[str, ...] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    prefix: str = ""

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServer":
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of command=[...] (stdio) or url=... (streamable HTTP)")
        if self.command is not None and not self.command:
            raise ValueError(f"MCP server {self.name!r}: command must name an executable")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url must be http:// or https://, got {self.url!r}")
        return self

    @classmethod
    def stdio(cls, name: str, command: str, *args: str, env: dict[str, str] | None = None,
              cwd: str | None = None, prefix: str = "") -> "McpServer":
        """A server this process spawns and talks to over its stdin/stdout."""
        return cls(name=name, command=(command, *args), env=env, cwd=cwd, prefix=prefix)

    @classmethod
    def http(cls, name: str, url: str, *, headers: dict[str, str] | None = None, prefix: str = "") -> "McpServer":
        """A server reached over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""
        return cls(name=name, url=url, headers=headers or {}, prefix=prefix)

    @property
    def key(self) -> str:
        """Identity of the connection (one session per key, per process and event loop)."""
        return self.model_dump_json()


class McpTool(BaseModel):
    """A tool as this caller exposes it: prefixed name, owning server, the server's own name."""

    model_config = ConfigDict(frozen=True)

    name: str
    server: str
    remote_name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class _Connection:
    """One live session to one server, owned by a background task of one event loop.

    The SDK's client must be entered and exited in the same task, so ``_own`` holds it open
    until ``close()`` or until the transport fails; ``gone`` resolves then, which fails the
    calls still waiting on this session.
    """

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.client: Any = None  # the entered ``mcp.Client``; None before ready and after death
        self.gone: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._own())

    async def _own(self) -> None:
        from mcp import Client

        try:
            async with Client(_transport(self.server)) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
            reason: BaseException = McpServerGone(f"MCP server {self.server.name!r}: session closed")
        except asyncio.CancelledError:
            reason = McpServerGone(f"MCP server {self.server.name!r}: session cancelled")
        except BaseException as exc:  # transport failures arrive as exception groups
            _log.warning("MCP server %s: session ended: %s", self.server.name, _describe(exc), extra=_EXTRA)
            reason = McpServerGone(f"MCP server {self.server.name!r} is gone: {_describe(exc)}")
        self.client = None
        self._ready.set()
        if not self.gone.done():
            self.gone.set_result(reason)

    async def ready(self, timeout: float) -> Any:
        """The entered client, or ``McpServerGone`` if the server cannot be reached in time."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            self.close()
            raise McpServerGone(f"MCP server {self.server.name!r}: no session within {timeout}s") from None
        if self.client is None:
            raise self.gone.result() if self.gone.done() else McpServerGone(f"MCP server {self.server.name!r}: not connected")
        return self.client

    @property
    def alive(self) -> bool:
        return not self.gone.done()

    def close(self) -> None:
        self._stop.set()
        if not self._ready.is_set():
            self._task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.wait({self._task})


def _transport(server: McpServer) -> Any:
    if server.command is not None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]), env=server.env, cwd=server.cwd)
        return stdio_client(params, errlog=sys.stderr)
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    return streamable_http_client(server.url or "", http_client=create_mcp_http_client(headers=dict(server.headers)))


def _describe(exc: BaseException) -> str:
    """The innermost messages of an exception (group), on one line."""
    inner = getattr(exc, "exceptions", None)
    if inner:
        return "; ".join(_describe(e) for e in inner)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# One session per (event loop, server) in this process: subagent actors reuse it across
# calls. Lives in the per-process registry (see ``cluster.process``).
_CONNECTIONS: Table[tuple[int, str], _Connection] = process_registry().mcp_sessions


def _connection(server: McpServer) -> _Connection:
    key = (id(asyncio.get_running_loop()), server.key)
    return _CONNECTIONS.get_or_create(key, lambda: _Connection(server), alive=lambda conn: conn.alive)


async def close_mcp_sessions() -> None:
    """Close every MCP session this process holds on the running loop (stdio servers exit)."""
    loop = id(asyncio.get_running_loop())
    conns = _CONNECTIONS.pop_where(lambda key: key[0] == loop)
    for conn in conns:
        conn.close()
    for conn in conns:
        await conn.wait_closed()


def _forget(server: McpServer, conn: _Connection) -> None:
    _CONNECTIONS.discard((id(asyncio.get_running_loop()), server.key), conn)
    conn.close()


def _to_result(result: Any) -> ToolCallResult:
    """An SDK ``CallToolResult`` as ours: text blocks, else the structured content as JSON."""
    texts = [TextContent(text=block.text) for block in result.content if getattr(block, "type", None) == "text"]
    if not texts and result.structured_content is not None:
        texts = [TextContent(text=json.dumps(result.structured_content))]
    if not texts and result.content:
        kinds = ", ".join(sorted({getattr(b, "type", "?") for b in result.content}))
        return ToolCallResult.error(f"the MCP tool answered only non-text content ({kinds})")
    return ToolCallResult(content=texts, is_error=bool(result.is_error))


class McpToolCaller:
    """A ``ToolCaller`` for the tools of one or more MCP servers.

    ``call_timeout`` bounds each call (a hung server fails that call), ``connect_timeout``
    each connection. The tools of one server share one pool of ``replicas`` subagent actors
    (default 1: MCP calls wait on I/O and one session serves many calls at once), and each
    replica keeps one session per server: a stdio server runs as at most ``replicas``
    processes, however many of its tools are called (``pool_group``).
    """

    def __init__(self, *servers: McpServer, call_timeout: float = 60.0, connect_timeout: float = 30.0,
                 replicas: int = 1, num_cpus: float = 0.0) -> None:
        problems: list[str] = []
        if not servers:
            problems.append("give at least one McpServer")
        if any(not isinstance(s, McpServer) for s in servers):
            problems.append("servers must be McpServer instances (McpServer.stdio(...) or McpServer.http(...))")
        names = [s.name for s in servers if isinstance(s, McpServer)]
        if len(set(names)) != len(names):
            problems.append(f"server names must be unique, got {names}")
        if call_timeout <= 0 or connect_timeout <= 0:
            problems.append(f"timeouts must be > 0, got call_timeout={call_timeout}, connect_timeout={connect_timeout}")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            problems.append(f"replicas must be an int >= 1, got {replicas!r}")
        if problems:
            raise ValueError("McpToolCaller: " + "; ".join(problems))
        self.servers: tuple[McpServer, ...] = servers
        self.call_timeout = float(call_timeout)
        self.connect_timeout = float(connect_timeout)
        self._replicas, self._num_cpus = replicas, float(num_cpus)
        # Identifies this caller's subagent pools across processes (it travels with pickles).
        self.pool_key = f"mcp-{uuid.uuid4().hex[:12]}"
        # Exposed name -> tool, filled by ``list_tools`` (plain data: it pickles with the caller).
        self._tools: dict[str, McpTool] = {}

    def __repr__(self) -> str:
        return f"McpToolCaller({', '.join(s.name for s in self.servers)})"

    @property
    def label(self) -> str:
        """How error messages name this caller."""
        return f"MCP servers {', '.join(repr(s.name) for s in self.servers)}"

    def pool_options(self, name: str) -> tuple[int, float]:
        """``(replicas, num_cpus)`` of each server's subagent pool."""
        return self._replicas, self._num_cpus

    def pool_group(self, name: str) -> str:
        """The pool that serves tool ``name``: its server's (``mcp:{server}``). Told by the tools
        listed in this process, else by the server's prefix, else by there being one server;
        when none tells (several servers without prefixes, nothing listed yet), one pool for
        all of them (``mcp:*``), whose replicas still keep one session per server."""
        server = self._server_of(name)
        return f"mcp:{server.name}" if server is not None else "mcp:*"

    def _server_of(self, name: str) -> McpServer | None:
        tool = self._tools.get(name)
        if tool is not None:
            return next(s for s in self.servers if s.name == tool.server)
        prefixed = sorted((s for s in self.servers if s.prefix and name.startswith(s.prefix)),
                          key=lambda s: len(s.prefix), reverse=True)
        if prefixed and (len(prefixed) == 1 or len(prefixed[0].prefix) > len(prefixed[1].prefix)):
            return prefixed[0]  # the longest prefix that matches, if only one server has it
        if len(self.servers) == 1:
            return self.servers[0]
        return None

    def names(self) -> list[str]:
        """The exposed tool names listed so far in this process (empty before any listing)."""
        return sorted(self._tools)

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of this caller's tools, listed or under a server's prefix:
        a prefixed name is this caller's to answer whatever this process has listed (one
        replica serves all of a server's tools), so an unknown one gets its error from here."""
        return name in self._tools or any(s.prefix and name.startswith(s.prefix) for s in self.servers)

    async def list_tools(self) -> list[McpTool]:
        """Connect to every server (from this process), list its tools and remember them."""
        return await self._learn(self.servers)

    async def _learn(self, servers: tuple[McpServer, ...]) -> list[McpTool]:
        """List the tools of ``servers`` and remember them in place of what was known of them."""
        listing = await asyncio.gather(*(self._list_server(s) for s in servers))
        tools = [tool for server_tools in listing for tool in server_tools]
        names = {s.name for s in servers}
        known = {name: tool for name, tool in self._tools.items() if tool.server not in names}
        for tool in tools:
            if tool.name in known:
                raise ValueError(
                    f"MCP tool {tool.name!r} is offered by servers {known[tool.name].server!r} and {tool.server!r}; "
                    "give one of them a prefix (McpServer.stdio(..., prefix='name.'))"
                )
            known[tool.name] = tool
        self._tools = known
        return sorted(tools, key=lambda t: t.name)

    async def _list_server(self, server: McpServer) -> list[McpTool]:
        conn = _connection(server)
        result = await self._guarded(server, conn, "tools/list", lambda client: client.list_tools())
        return [
            McpTool(name=server.prefix + t.name, server=server.name, remote_name=t.name,
                    description=t.description or "", input_schema=dict(t.input_schema or {}))
            for t in result.tools
        ]

    async def aclose(self) -> None:
        """Close this process's sessions to the servers (stdio servers exit); calls reconnect later."""
        loop = id(asyncio.get_running_loop())
        mine = {(loop, s.key) for s in self.servers}
        conns = _CONNECTIONS.pop_where(lambda key: key in mine)
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    async def _route(self, name: str) -> tuple[McpServer, str] | None:
        if name not in self._tools:
            # Its own server first: a replica of that server's pool connects to no other one.
            server = self._server_of(name)
            if server is not None:
                await self._learn((server,))
        if name not in self._tools:
            await self.list_tools()  # unknown: the error names every server's tools
        tool = self._tools.get(name)
        if tool is None:
            return None
        server = next(s for s in self.servers if s.name == tool.server)
        return server, tool.remote_name

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Call the MCP tool exposed as ``name``; an unknown name is a tool error listing the known ones."""
        route = await self._route(name)
        if route is None:
            return ToolCallResult.error(f"unknown MCP tool {name!r}; tools: {', '.join(self.names()) or 'none'}")
        server, remote = route
        conn = _connection(server)
        result = await self._guarded(server, conn, f"tool {name!r}", lambda client: client.call_tool(remote, arguments))
        return _to_result(result)

    async def _guarded(self, server: McpServer, conn: _Connection, what: str, request: Any) -> Any:
        """Run ``request(client)`` on ``conn``: bounded by ``call_timeout``, failed if the server dies."""
        client = await conn.ready(self.connect_timeout)
        call = asyncio.ensure_future(request(client))
        try:
            done, _ = await asyncio.wait({call, conn.gone}, timeout=self.call_timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # our own cancellation: stop the request too
            call.cancel()
            raise
        if call in done and not call.cancelled() and call.exception() is None:
            return call.result()
        if not done:
            call.cancel()
            raise McpCallTimeout(f"MCP server {server.name!r}: {what} got no answer within {self.call_timeout}s")
        if not call.done():
            call.cancel()
        failure = None if call.cancelled() or not call.done() else call.exception()
        if failure is not None and conn.alive and getattr(failure, "code", _CONNECTION_CLOSED) != _CONNECTION_CLOSED:
            raise McpError(f"MCP server {server.name!r} rejected {what}: {_describe(failure)}") from failure
        _forget(server, conn)  # the transport failed (or the session was cancelled under us): reconnect next time
        why = _describe(failure) if failure is not None else _describe(conn.gone.result()) if conn.gone.done() else "cancelled"
        raise McpServerGone(f"MCP server {server.name!r}: {what} failed because the server went away ({why}); "
                            "the next call reconnects")
