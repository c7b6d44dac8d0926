"""CompositeCaller: one name space over several callers, with clear unknown/ambiguous errors."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from actors import SkillRegistry
from actors import AmbiguousTool, CompositeCaller, UnknownTool
from tests.actors.servers.launch import mcp_caller, stdio_server


class In(BaseModel):
    x: int = 0


class Out(BaseModel):
    x: int
    who: str


def _skill(who: str):
    def skill(inp: In) -> Out:
        return Out(x=inp.x, who=who)

    return skill


def registry(who: str, *names: str, replicas: int = 4) -> SkillRegistry:
    skills = SkillRegistry(replicas=replicas)
    for name in names:
        skills.register(name, _skill(who))
    return skills


async def test_a_call_goes_to_the_one_member_that_serves_the_name():
    composite = CompositeCaller(registry("a", "alpha"), registry("b", "beta"))
    result = await composite.call_tool("beta", {"x": 3})
    assert Out.model_validate_json(result.text) == Out(x=3, who="b")
    assert composite.names() == ["alpha", "beta"]


async def test_an_unknown_name_is_an_error_listing_every_known_tool():
    composite = CompositeCaller(registry("a", "alpha"), registry("b", "beta"))
    with pytest.raises(UnknownTool, match="no member serves the tool 'gamma'; known tools: alpha, beta"):
        composite.resolve("gamma")
    result = await composite.call_tool("gamma", {})
    assert result.is_error and result.text == "no member serves the tool 'gamma'; known tools: alpha, beta"


async def test_an_ambiguous_name_names_both_owners_and_asks_for_a_prefix():
    composite = CompositeCaller(registry("a", "alpha", "shared"), registry("b", "shared"))
    with pytest.raises(AmbiguousTool, match="the tool 'shared' is served by SkillRegistry#0 and SkillRegistry#1; give one of them a prefix"):
        composite.resolve("shared")
    assert (await composite.call_tool("shared", {})).is_error
    assert Out.model_validate_json((await composite.call_tool("alpha", {"x": 1})).text).who == "a"


async def test_mcp_tools_join_the_name_space_once_listed_and_clash_with_skills_of_the_same_name():
    mcp = mcp_caller(stdio_server())
    composite = CompositeCaller(registry("a", "add"), mcp)
    with pytest.raises(UnknownTool, match="'pid'"):
        composite.resolve("pid")  # not listed yet: unknown
    assert "pid" in await composite.list_tools()
    assert composite.resolve("pid") is mcp
    with pytest.raises(AmbiguousTool, match="'add' is served by SkillRegistry#0 and MCP servers 'local'"):
        composite.resolve("add")
    await mcp.aclose()


async def test_a_call_to_an_unlisted_mcp_tool_lists_the_servers_first():
    mcp = mcp_caller(stdio_server())
    composite = CompositeCaller(registry("a", "alpha"), mcp)
    assert (await composite.call_tool("pid", {})).text.isdigit()
    await mcp.aclose()


def test_pool_options_follow_the_member_that_owns_the_name():
    composite = CompositeCaller(registry("a", "alpha", replicas=3), mcp_caller(stdio_server(prefix="m."), replicas=2))
    assert composite.pool_options("alpha") == (3, 0.0)
    assert composite.pool_options("m.anything") == (2, 0.0)
    assert composite.pool_options("nobody") == (1, 0.0)


def test_members_must_be_callers_that_can_say_what_they_serve():
    class Opaque:
        async def call_tool(self, name, arguments):
            raise AssertionError

    with pytest.raises(TypeError, match=r"member 0 \(Opaque\) cannot say which tools it serves.*member 1 \(int\) has no async call_tool"):
        CompositeCaller(Opaque(), 3)
    with pytest.raises(TypeError, match="give at least one member"):
        CompositeCaller()
