"""The official reference MCP servers from PyPI (``mcp-server-time``, ``mcp-server-git``)
behind ``McpToolCaller``, through handoffs: their plain-text answers read as ``str``, their
JSON ones into models, and each server runs as one process however many of its tools a
batch calls.

Server processes are counted from ``/proc``, not from soloist's own counters: the live
processes descended from this test process (the subagent actors that spawn the servers are
children of this process's Ray) that run the server's module with the test's own directory
as their working directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

import pytest
from pydantic import BaseModel

from actors import (Call, DecodingError, McpServer, McpToolCaller, Orchestrator, close_mcp_sessions, handoff,
                    parallel_handoff)
from tests._waits import HANG_GUARD_S, eventually
from tests._models import Empty

pytest.importorskip("mcp_server_git", reason="the reference git server: pip install -e '.[test]'")
pytest.importorskip("mcp_server_time", reason="the reference time server: pip install -e '.[test]'")

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

GIT, TIME = "mcp_server_git", "mcp_server_time"


class CurrentTime(BaseModel):
    """``get_current_time``'s answer (JSON text)."""

    timezone: str
    datetime: datetime
    day_of_week: str
    is_dst: bool


class Conversion(BaseModel):
    """``convert_time``'s answer (JSON text)."""

    source: CurrentTime
    target: CurrentTime
    time_difference: str


# ------------------------------------------------------------------ the servers and their processes


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository on ``main`` with two commits and an unstaged change to ``README.md``."""
    path = tmp_path_factory.mktemp("repo")
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "Test Author")
    _git(path, "config", "user.email", "author@example.com")
    (path / "README.md").write_text("hello\n")
    _git(path, "add", "README.md")
    _git(path, "commit", "-q", "-m", "first commit")
    (path / "notes.txt").write_text("second\n")
    _git(path, "add", "notes.txt")
    _git(path, "commit", "-q", "-m", "add notes")
    (path / "README.md").write_text("hello\nworld\n")
    return path


def _caller(repo: Path, where: Path, **options: object) -> McpToolCaller:
    """Both servers over stdio, started by whichever process calls them, in ``where``."""
    return McpToolCaller(
        McpServer.stdio("time", sys.executable, "-m", TIME, "--local-timezone", "UTC", cwd=str(where), prefix="time."),
        McpServer.stdio("git", sys.executable, "-m", GIT, "--repository", str(repo), cwd=str(where), prefix="git."),
        connect_timeout=HANG_GUARD_S, call_timeout=HANG_GUARD_S, **options)  # a busy machine starts Python slowly


def server_processes(module: str, where: Path) -> dict[int, int]:
    """The live processes descended from this one that run ``module`` in directory ``where``
    (not counting a server's own child between its fork and its exec of ``git``), each with
    its parent: the subagent that spawned it."""
    parents: dict[int, int] = {}
    running: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state, ppid = stat.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace").split("\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # it exited meanwhile (or is not ours to read)
            continue
        parents[pid] = int(ppid)
        if state != "Z" and module in argv and cwd == str(where):
            running.add(pid)

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return {pid: parents[pid] for pid in sorted(running) if parents[pid] not in running and descends(pid)}


def server_pids(module: str, where: Path) -> list[int]:
    return list(server_processes(module, where))


class Sampler:
    """Reads ``server_processes`` of each module every few milliseconds in a thread, while
    open: every server process seen (with its parent), and the most that ran at once."""

    def __init__(self, where: Path, *modules: str) -> None:
        self.where, self.modules = where, modules
        self.seen: dict[str, dict[int, int]] = {module: {} for module in modules}
        self.peak: dict[str, int] = {module: 0 for module in modules}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            for module in self.modules:
                processes = server_processes(module, self.where)
                self.seen[module].update(processes)
                self.peak[module] = max(self.peak[module], len(processes))
            if self._stop.wait(0.02):
                return

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def servers_gone(where: Path) -> None:
    """Until no server started in ``where`` runs: the replicas that spawned them retire once
    idle, and a stdio server exits with its session."""
    await eventually(lambda: asyncio.to_thread(lambda: server_pids(GIT, where) + server_pids(TIME, where)),
                     lambda pids: not pids, f"the MCP servers started in {where} to exit")


class Run(NamedTuple):
    orch: Orchestrator
    where: Path


@pytest.fixture(scope="module")
async def run(ray_module: None, repo: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    where = tmp_path_factory.mktemp("servers")
    orch = Orchestrator(Empty(), caller=_caller(repo, where))
    try:
        yield Run(orch, where)
    finally:
        await orch.close()
        await servers_gone(where)


# ------------------------------------------------------------------ answers


async def test_git_status_answers_plain_text_that_reads_as_str_and_names_the_branch(run: Run, repo: Path):
    status = await handoff(run.orch, Call("git.git_status", {"repo_path": str(repo)}), str)
    assert status.startswith("Repository status:\nOn branch main\n")
    assert "modified:   README.md" in status


async def test_get_current_time_answers_json_that_reads_into_a_model(run: Run):
    before = datetime.now(timezone.utc)
    now = await handoff(run.orch, Call("time.get_current_time", {"timezone": "Europe/Paris"}), CurrentTime)
    assert now.timezone == "Europe/Paris"
    assert now.datetime.utcoffset() == (timedelta(hours=2) if now.is_dst else timedelta(hours=1))
    assert before - timedelta(seconds=1) <= now.datetime <= datetime.now(timezone.utc)  # the server has whole seconds
    assert now.day_of_week == now.datetime.strftime("%A")


async def test_convert_time_answers_json_that_reads_into_a_nested_model(run: Run):
    converted = await handoff(run.orch, Call("time.convert_time", {
        "source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}), Conversion)
    assert (converted.source.datetime.hour, converted.target.datetime.hour) == (12, 21)
    assert converted.target.timezone == "Asia/Tokyo" and converted.time_difference == "+9.0h"


async def test_a_plain_text_answer_asked_for_as_a_model_fails_naming_the_tool_and_showing_the_text(run: Run, repo: Path):
    with pytest.raises(DecodingError) as failure:
        await handoff(run.orch, Call("git.git_status", {"repo_path": str(repo)}), CurrentTime)
    message = str(failure.value)
    assert message.startswith("handoff 'git.git_status': decoding output as CurrentTime failed: "
                              "the tool answered text that is not JSON")
    assert "it begins 'Repository status:\\nOn branch main\\n" in message


def _is_time_in(zone: str) -> Callable[[str], bool]:
    return lambda text: CurrentTime.model_validate_json(text).timezone == zone


#: Eight calls over both servers (five git tools, both time tools), and what each answer must say.
EIGHT: list[tuple[str, dict[str, object], Callable[[str], bool]]] = [
    ("git.git_status", {}, lambda text: "On branch main" in text and "README.md" in text),
    ("git.git_log", {"max_count": 1}, lambda text: "add notes" in text and "first commit" not in text),
    ("time.get_current_time", {"timezone": "Asia/Tokyo"}, _is_time_in("Asia/Tokyo")),
    ("git.git_branch", {"branch_type": "local"}, lambda text: text.strip() == "* main"),
    ("git.git_show", {"revision": "HEAD~1"}, lambda text: "first commit" in text and "+hello" in text),
    ("time.convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "America/New_York"},
     lambda text: json.loads(text)["target"]["timezone"] == "America/New_York"),
    ("git.git_diff_unstaged", {}, lambda text: "+world" in text and "notes.txt" not in text),
    ("time.get_current_time", {"timezone": "UTC"}, _is_time_in("UTC")),
]


def _eight(repo: Path) -> list[Call]:
    return [Call(tool, {**arguments, "repo_path": str(repo)} if tool.startswith("git.") else arguments)
            for tool, arguments, _ in EIGHT]


async def test_eight_parallel_calls_over_both_servers_are_positional_and_right(run: Run, repo: Path):
    results = await parallel_handoff(run.orch, _eight(repo), str)
    assert [r.index for r in results] == list(range(8))
    assert [r.error for r in results] == [None] * 8
    wrong = [(tool, r.output) for (tool, _, right), r in zip(EIGHT, results) if not right(r.output)]
    assert not wrong


# ------------------------------------------------------------------ processes


@pytest.mark.parametrize("replicas", [1, 2])
async def test_each_server_runs_as_one_process_per_replica_however_many_of_its_tools_are_called(
        repo: Path, tmp_path: Path, replicas: int):
    # Five git tools and two time tools, each called more than once: one pool per server.
    calls = _eight(repo) + _eight(repo)
    orch = Orchestrator(Empty(), caller=_caller(repo, tmp_path, replicas=replicas))
    try:
        with Sampler(tmp_path, GIT, TIME) as servers:
            results = await parallel_handoff(orch, calls, str)
    finally:
        await orch.close()
    assert [r.error for r in results] == [None] * len(calls)
    assert all(right(r.output) for (_, _, right), r in zip(EIGHT + EIGHT, results))
    for module in (GIT, TIME):
        # Never more at once than the server's pool has replicas (one per tool before: seven
        # of each), and each subagent spawned it once. (A pool idle while another one's
        # replica starts may retire and be created again, spawning the server anew: counted
        # by its parents, not assumed away.)
        assert 1 <= servers.peak[module] <= replicas, (module, servers.peak, servers.seen)
        assert len(set(servers.seen[module].values())) == len(servers.seen[module]), (module, servers.seen)
    await servers_gone(tmp_path)


async def test_the_tools_of_servers_without_prefixes_share_a_pool_until_listed_then_their_servers(
        repo: Path, tmp_path: Path):
    caller = McpToolCaller(McpServer.stdio("time", sys.executable, "-m", TIME, cwd=str(tmp_path)),
                           McpServer.stdio("git", sys.executable, "-m", GIT, "--repository", str(repo), cwd=str(tmp_path)),
                           connect_timeout=HANG_GUARD_S)
    assert caller.pool_group("git_status") == caller.pool_group("get_current_time") == "mcp:*"
    try:
        await caller.list_tools()  # in this process: it spawns both servers
        assert (len(server_pids(GIT, tmp_path)), len(server_pids(TIME, tmp_path))) == (1, 1)
    finally:
        await close_mcp_sessions()
    assert {caller.pool_group(name) for name in ("git_status", "git_log", "git_show")} == {"mcp:git"}
    assert {caller.pool_group(name) for name in ("get_current_time", "convert_time")} == {"mcp:time"}
    await servers_gone(tmp_path)
