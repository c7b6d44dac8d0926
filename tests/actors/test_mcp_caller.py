"""McpToolCaller against a real MCP server, in this process (no Ray): listing, calls, failures."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal

import pytest

from actors import McpCallTimeout, McpServer, McpServerGone, close_mcp_sessions
from tests._waits import eventually
from tests.actors.servers.filepeak import FilePeak
from tests.actors.servers.launch import HttpServer, mcp_caller, stdio_server

TOOLS = ["add", "fail", "pid", "slow", "work"]


@pytest.fixture(autouse=True)
async def _close_sessions():
    yield
    await close_mcp_sessions()  # stdio servers spawned by this process exit with their sessions


@pytest.fixture
def http_server():
    server = HttpServer().start()
    yield server
    server.kill()


async def test_lists_the_tools_of_a_stdio_server_with_their_schemas():
    caller = mcp_caller(stdio_server())
    tools = await caller.list_tools()
    assert [t.name for t in tools] == TOOLS
    add = next(t for t in tools if t.name == "add")
    assert add.server == "local" and add.description == "Add two integers."
    assert set(add.input_schema["properties"]) == {"a", "b"}
    assert caller.names() == TOOLS


async def test_prefixes_keep_two_servers_with_the_same_tools_apart(http_server):
    caller = mcp_caller(stdio_server(prefix="local."), http_server.spec(prefix="remote."))
    names = [t.name for t in await caller.list_tools()]
    assert names == [f"local.{t}" for t in TOOLS] + [f"remote.{t}" for t in TOOLS]
    local = json.loads((await caller.call_tool("local.pid", {})).text)
    remote = json.loads((await caller.call_tool("remote.pid", {})).text)
    assert remote == http_server.proc.pid and local != remote


async def test_same_tool_names_without_prefixes_are_refused(http_server):
    caller = mcp_caller(stdio_server(), http_server.spec())
    with pytest.raises(ValueError, match="'add' is offered by servers 'local' and 'remote'; give one of them a prefix"):
        await caller.list_tools()


async def test_a_call_round_trips_json_over_http(http_server):
    result = await mcp_caller(http_server.spec()).call_tool("add", {"a": 2, "b": 40})
    assert not result.is_error
    assert json.loads(result.text) == {"sum": 42, "server_pid": http_server.proc.pid}


async def test_a_tool_error_is_an_is_error_result_with_the_tools_text():
    result = await mcp_caller(stdio_server()).call_tool("fail", {"reason": "no way"})
    assert result.is_error and result.text == "Error executing tool fail: refused: no way"


async def test_an_unknown_tool_is_a_tool_error_listing_the_known_ones():
    result = await mcp_caller(stdio_server()).call_tool("nope", {})
    assert result.is_error and result.text == "unknown MCP tool 'nope'; tools: add, fail, pid, slow, work"


async def test_a_hung_server_fails_the_call_after_call_timeout_and_keeps_the_session():
    caller = mcp_caller(stdio_server(), call_timeout=10)  # long enough for the answered calls on a busy machine
    pid_before = json.loads((await caller.call_tool("pid", {})).text)
    with pytest.raises(McpCallTimeout, match=r"tool 'slow' got no answer within 10\.0s"):
        await caller.call_tool("slow", {"seconds": 3600})
    assert json.loads((await caller.call_tool("pid", {})).text) == pid_before


async def test_a_stdio_server_killed_mid_call_fails_that_call_and_the_next_call_respawns_it():
    caller = mcp_caller(stdio_server())
    pid = json.loads((await caller.call_tool("pid", {})).text)
    slow = asyncio.ensure_future(caller.call_tool("slow", {"seconds": 60}))
    add = asyncio.ensure_future(caller.call_tool("add", {"a": 1, "b": 1}))
    assert json.loads((await add).text)["sum"] == 2  # the session is up and serving
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(McpServerGone, match="server went away.*the next call reconnects"):
        await slow
    new_pid = json.loads((await caller.call_tool("pid", {})).text)
    assert new_pid != pid


async def test_an_http_server_killed_mid_call_fails_that_call_and_a_restarted_one_is_used_again(http_server, tmp_path):
    caller = mcp_caller(http_server.spec())
    pid = json.loads((await caller.call_tool("pid", {})).text)
    assert pid == http_server.proc.pid
    counter = str(tmp_path / "peak.json")
    slow = asyncio.ensure_future(caller.call_tool("work", {"counter": counter, "seconds": 0, "tag": 0, "gate": True}))
    # Kill it once it is inside the call (the gate never opens).
    await eventually(lambda: asyncio.to_thread(FilePeak(counter).report), lambda r: pid in r["pids"], "the server inside the call")
    http_server.kill()
    with pytest.raises(McpServerGone, match="'remote'"):
        await slow
    with pytest.raises(McpServerGone):
        await caller.call_tool("pid", {})  # nobody listens on the port now
    http_server.start()
    assert json.loads((await caller.call_tool("pid", {})).text) == http_server.proc.pid


async def test_the_caller_pickles_with_its_listing_but_no_session():
    caller = mcp_caller(stdio_server(prefix="x."), call_timeout=3)
    try:
        await caller.list_tools()  # a live session now serves it in this process
        twin = pickle.loads(pickle.dumps(caller))  # only configuration and the listing travel
        assert twin.servers == caller.servers and twin.call_timeout == 3 and twin.pool_key == caller.pool_key
        assert twin.names() == caller.names() != []
    finally:
        await close_mcp_sessions()


def test_bad_configuration_reports_every_problem():
    with pytest.raises(ValueError, match="give exactly one of command"):
        McpServer(name="x")
    with pytest.raises(ValueError, match="server names must be unique.*timeouts must be > 0"):
        mcp_caller(stdio_server(), stdio_server(), call_timeout=0)
