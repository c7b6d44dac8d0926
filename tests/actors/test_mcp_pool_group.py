"""The tools of one MCP server share one subagent pool (no Ray): how a tool's pool is named."""

from __future__ import annotations

from pydantic import BaseModel

from actors import CompositeCaller, McpServer, McpToolCaller, SharedPools, SkillRegistry


class Number(BaseModel):
    n: int


def _stdio(name: str, prefix: str = "") -> McpServer:
    return McpServer.stdio(name, "mcp-server-" + name, prefix=prefix)


def test_an_mcp_caller_declares_that_its_tools_share_pools():
    assert isinstance(McpToolCaller(_stdio("git")), SharedPools)
    assert not isinstance(SkillRegistry(), SharedPools)


def test_the_tools_of_one_server_go_to_its_pool_by_their_prefix():
    caller = McpToolCaller(_stdio("git", "git."), _stdio("time", "time."))
    assert {caller.pool_group(name) for name in ("git.git_status", "git.git_log", "git.git_show")} == {"mcp:git"}
    assert caller.pool_group("time.get_current_time") == "mcp:time"


def test_the_longest_matching_prefix_tells_the_server():
    caller = McpToolCaller(_stdio("fs", "fs."), _stdio("fsx", "fs.x."))
    assert caller.pool_group("fs.read") == "mcp:fs"
    assert caller.pool_group("fs.x.read") == "mcp:fsx"


def test_a_single_server_has_every_tool_without_a_prefix():
    assert McpToolCaller(_stdio("git")).pool_group("git_status") == "mcp:git"


def test_servers_that_no_prefix_tells_apart_share_one_pool_until_their_tools_are_listed():
    caller = McpToolCaller(_stdio("git"), _stdio("time"))
    assert caller.pool_group("git_status") == caller.pool_group("get_current_time") == "mcp:*"
    tied = McpToolCaller(_stdio("a", "x."), _stdio("b", "x."))
    assert tied.pool_group("x.tool") == "mcp:*"


def test_a_composite_keeps_its_mcp_members_pools_apart_and_other_skills_in_their_own():
    skills = SkillRegistry()

    @skills.skill("add")
    def add(inp: Number) -> Number:
        return inp

    first = McpToolCaller(_stdio("git", "a."))
    second = McpToolCaller(_stdio("git", "b."))
    composite = CompositeCaller(skills, first, second)
    assert composite.pool_group("a.git_status") == composite.pool_group("a.git_log") == "1:mcp:git"
    assert composite.pool_group("b.git_status") == "2:mcp:git"
    assert composite.pool_group("add") == "add"
