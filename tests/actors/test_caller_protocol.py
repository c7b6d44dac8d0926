"""Every caller soloist ships declares the pooled-caller protocol; plain callers still work."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from actors import (
    DEFAULT_POOL,
    CompositeCaller,
    LlmCaller,
    LlmConfig,
    McpServer,
    McpToolCaller,
    OrchestratorCaller,
    PooledCaller,
    SkillRegistry,
    ToolCaller,
    ToolCallResult,
    pool_for,
)


class _In(BaseModel):
    x: int = 0


class _Out(BaseModel):
    x: int = 0


class _Plain:
    """A ToolCaller and a Container, nothing more."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        return ToolCallResult.of_json({})

    def __contains__(self, name: object) -> bool:
        return name == "plain"


def _shipped() -> list[Any]:
    skills = SkillRegistry(replicas=3)
    mcp = McpToolCaller(McpServer.http("fs", "http://127.0.0.1:9/mcp", prefix="fs."))
    llm = LlmCaller(LlmConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    nested = OrchestratorCaller("inner", prefix="inner.")
    return [skills, mcp, llm, nested, CompositeCaller(skills, mcp, llm, nested)]


def test_every_shipped_caller_is_a_pooled_caller_with_a_key_and_a_label():
    for caller in _shipped():
        assert isinstance(caller, PooledCaller), type(caller).__name__
        assert caller.pool_key and isinstance(caller.label, str)
        replicas, num_cpus = caller.pool_options("anything")
        assert replicas >= 1 and num_cpus >= 0


def test_a_composite_routes_ownership_through_the_protocol_and_a_plain_container():
    skills = SkillRegistry()

    @skills.skill("alpha")
    def alpha(inp: _In) -> _Out:  # pragma: no cover - never called here
        return _Out(x=inp.x)

    composite = CompositeCaller(skills, _Plain(), OrchestratorCaller("inner", prefix="inner."))
    assert composite.owns("alpha") and composite.owns("plain") and composite.owns("inner.x")
    assert not composite.owns("nobody")
    assert composite.pool_options("plain") == DEFAULT_POOL


def test_a_plain_caller_is_a_tool_caller_but_not_a_pooled_one():
    plain = _Plain()
    assert isinstance(plain, ToolCaller) and not isinstance(plain, PooledCaller)


@pytest.mark.ray
async def test_a_plain_caller_gets_a_default_pool_keyed_by_its_pickle(ray_session):
    pool = pool_for(_Plain(), "plain")
    assert pool.statistics().replicas == DEFAULT_POOL[0]
    assert pool_for(_Plain(), "plain") is pool  # same pickle, same pool
