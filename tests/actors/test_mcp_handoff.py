"""MCP tools through handoff / parallel_handoff: the calls run in subagent actors, under the cap."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from pydantic import BaseModel

from actors import Call, CallerFailed, Orchestrator, SkillRegistry, ToolReportedError, handoff, parallel_handoff
from actors import CompositeCaller, McpServerGone
from tests._waits import eventually
from tests.actors.servers.filepeak import FilePeak
from tests.actors.servers.launch import HttpServer, mcp_caller, stdio_server

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class AddIn(BaseModel):
    a: int
    b: int


class Sum(BaseModel):
    sum: int
    server_pid: int


class WorkIn(BaseModel):
    counter: str
    seconds: float
    tag: int = 0
    gate: bool = False
    """Stay counted in flight until the test opens the counter's gate, then sleep ``seconds``."""


class Worked(BaseModel):
    tag: int
    where: str


local = SkillRegistry(replicas=4)


@local.skill("local_work")
async def local_work(inp: WorkIn) -> Worked:
    peak = FilePeak(inp.counter)
    peak.enter()
    try:
        if inp.gate:
            await peak.gate()
        await asyncio.sleep(inp.seconds)
    finally:
        peak.exit()
    return Worked(tag=inp.tag, where="local")


@pytest.fixture(scope="module")
def http_server():
    server = HttpServer().start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def run(ray_module, http_server):
    """One run whose caller serves local skills, a stdio MCP server and an HTTP MCP server."""
    mcp = mcp_caller(stdio_server(prefix="local."), http_server.spec(prefix="remote."), call_timeout=30)
    orch = Orchestrator(Sum(sum=0, server_pid=0), caller=CompositeCaller(local, mcp))
    yield orch
    asyncio.run(orch.close())


@pytest.fixture
def counter(tmp_path):
    return str(tmp_path / "peak.json")


async def _file_report(counter: str, what: str, ready) -> dict:  # noqa: ANN001
    """The counter file's report once ``ready(report)`` holds (the work writes it as it runs)."""
    return await eventually(lambda: asyncio.to_thread(FilePeak(counter).report), ready, what)


async def test_a_typed_round_trip_through_handoff_over_stdio_runs_in_a_subagent_not_the_driver(run):
    out = await handoff(run, Call("local.add", AddIn(a=2, b=3)), Sum)
    assert out.sum == 5
    parent = int(os.popen(f"ps -o ppid= -p {out.server_pid}").read().strip())
    assert parent != os.getpid()  # the stdio server was spawned by a subagent actor


async def test_a_typed_round_trip_through_handoff_over_http(run, http_server):
    assert await handoff(run, Call("remote.add", {"a": 40, "b": 2}), Sum) == Sum(sum=42, server_pid=http_server.proc.pid)


async def test_an_mcp_tool_error_raises_tool_reported_error_with_the_tools_text(run):
    with pytest.raises(ToolReportedError, match="handoff 'local.fail': the tool reported an error: .*refused: nope"):
        await handoff(run, Call("local.fail", {"reason": "nope"}), Sum)


async def test_an_unknown_tool_under_a_servers_prefix_names_the_servers_tools(run):
    with pytest.raises(ToolReportedError, match="unknown MCP tool 'remote.nope'; tools: local.add, .*, remote.work"):
        await handoff(run, Call("remote.nope", {}), Sum)


async def test_a_server_killed_mid_call_fails_that_item_and_the_batch_completes(run, http_server, counter):
    calls = [Call("remote.work", WorkIn(counter=counter, seconds=0, tag=1, gate=True)),  # the gate never opens
             Call("local.work", WorkIn(counter=counter, seconds=0.05, tag=2)),
             Call("local_work", WorkIn(counter=counter, seconds=0.05, tag=3))]
    batch = asyncio.ensure_future(parallel_handoff(run, calls, Worked))
    pid = http_server.proc.pid
    await _file_report(counter, "the HTTP server inside the call", lambda r: pid in r.get("pids", []))
    http_server.kill()
    results = await batch
    assert isinstance(results[0].error, CallerFailed) and isinstance(results[0].error.__cause__, McpServerGone)
    assert "the server went away" in str(results[0].error)
    assert [r.output for r in results[1:]] == [Worked(tag=2, where="mcp"), Worked(tag=3, where="local")]
    http_server.start()  # the subagent reconnects to the restarted server
    assert (await handoff(run, Call("remote.add", {"a": 1, "b": 1}), Sum)).server_pid == http_server.proc.pid


async def test_a_stdio_server_killed_mid_call_fails_that_item_and_is_respawned(run, counter):
    batch = asyncio.ensure_future(parallel_handoff(run, [Call("local.work", WorkIn(counter=counter, seconds=0, gate=True))], Worked))
    [pid] = (await _file_report(counter, "the stdio server inside the call", lambda r: bool(r.get("pids"))))["pids"]
    os.kill(pid, signal.SIGKILL)
    [result] = await batch
    assert isinstance(result.error.__cause__, McpServerGone)
    again = await handoff(run, Call("local.work", WorkIn(counter=counter, seconds=0, tag=7)), Worked)
    assert again == Worked(tag=7, where="mcp")
    assert len(FilePeak(counter).report()["pids"]) == 2  # a new server process served it


async def test_a_hung_server_gives_that_item_a_timeout_error(run, counter):
    # The timeout must be long enough for the answered call on a busy machine: it is the
    # subject only for the call that never gets an answer.
    hung = mcp_caller(stdio_server(), call_timeout=10)
    orch = Orchestrator(Sum(sum=0, server_pid=0), caller=hung)
    try:
        results = await parallel_handoff(orch, [Call("slow", {"seconds": 3600}), Call("add", {"a": 1, "b": 2})], Sum)
    finally:
        await orch.close()
    assert "got no answer within 10.0s" in str(results[0].error)
    assert results[1].output.sum == 3


async def test_the_cap_of_four_holds_across_mcp_and_local_skills_in_one_batch(run, counter):
    kinds = ["local_work", "local.work", "remote.work"]
    calls = [Call(kinds[i % 3], WorkIn(counter=counter, seconds=0.3, tag=i, gate=True)) for i in range(18)]
    run.set_max_parallel(100)
    batch = asyncio.ensure_future(parallel_handoff(run, calls, Worked))
    await _file_report(counter, "4 in flight", lambda r: r["current"] >= 4)  # the first four overlap ...
    FilePeak(counter).open()  # ... then all go on, still counted
    results = await batch
    assert [r.output.tag for r in results] == list(range(18))
    assert {r.output.where for r in results} == {"local", "mcp"}
    report = FilePeak(counter).report()
    assert report["peak"] == 4 and report["finished"] == 18 and report["current"] == 0
