"""The pydantic-ai model subagent reports each response's usage: the run's tokens per agent and the
model's tokens in the metrics equal what pydantic-ai itself counted for the run (its
``RunUsage``, summed by the framework from the responses, outside soloist's counters)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse

from actors.pydantic_ai import SoloistAgent
from cluster.metrics import MetricsDelta, llm_token_totals, read_totals, run_token_totals
from tests._waits import eventually
from tests.pydantic_ai._agents import MODEL_REQUESTS, build_agent

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


async def test_a_durable_agents_token_usage_reaches_its_run_and_model_metrics(tmp_path: Path) -> None:
    name = f"usage-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.log"
    durable = SoloistAgent(build_agent(ledger, name=name))
    result = await durable.run("go", deps=str(ledger), run_id="u-1")
    usage = result.usage()
    assert usage.requests == MODEL_REQUESTS and usage.input_tokens > 0 and usage.output_tokens > 0
    run = durable.run_name("u-1")

    def agent_tokens(totals: MetricsDelta) -> tuple[int, int]:
        mine = [v for (r, skill), v in run_token_totals(totals).items() if r == run and skill.endswith(name)]
        return sum(v.input_tokens for v in mine), sum(v.output_tokens for v in mine)

    model = {m.model_name for m in result.all_messages() if isinstance(m, ModelResponse)}.pop()
    await eventually(lambda: asyncio.to_thread(read_totals),
                     lambda t: agent_tokens(t) == (usage.input_tokens, usage.output_tokens)
                     and (m := llm_token_totals(t).get(model or "")) is not None and m.input_tokens >= usage.input_tokens,
                     "the run's tokens by agent equal pydantic-ai's own count, and its model's include them")
