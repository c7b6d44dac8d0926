"""Orchestrator logs: every record carries the component and the run's name, handoff records the skill."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, ToolReportedError, handoff, parallel_handoff
from cluster import JsonFormatter
from tests._models import Empty

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class NumIn(BaseModel):
    n: int


class NumOut(BaseModel):
    n: int


skills = SkillRegistry(replicas=2)


@skills.skill("echo")
def echo(inp: NumIn) -> NumOut:
    return NumOut(n=inp.n)


@skills.skill("explode")
def explode(inp: NumIn) -> NumOut:
    raise ValueError(f"exploded on {inp.n}")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured(ray_session: None) -> Iterator[tuple[Orchestrator, Capture, logging.Logger]]:
    """An orchestrator logging into its own logger (not propagated, so other handlers never interfere)."""
    logger = logging.getLogger(f"test.soloist.{id(object())}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = Capture()
    logger.addHandler(handler)
    orch = Orchestrator(Empty(), caller=skills)
    orch.set_logger(logger)
    yield orch, handler, logger
    logger.removeHandler(handler)
    asyncio.run(orch.close())  # a no-op when the test closed it


async def test_the_clamp_warning_carries_the_component_the_run_and_the_skills(captured):
    orch, handler, _ = captured
    try:
        orch.set_max_parallel(9)
        results = await parallel_handoff(orch, [Call("echo", NumIn(n=i)) for i in range(3)], NumOut)
    finally:
        await orch.close()
    assert all(r.ok for r in results)
    [record] = [r for r in handler.records if "clamped" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "max_parallel 9 is above the hard ceiling; clamped to 4 for this parallel handoff"
    assert record.component == "agent-orchestrator"
    assert record.orchestrator == orch.name
    assert record.skill == "echo"


async def test_a_failed_handoff_is_logged_with_the_component_and_its_skill(captured):
    orch, handler, _ = captured
    try:
        with pytest.raises(ToolReportedError):
            await handoff(orch, Call("explode", NumIn(n=7)), NumOut)
        results = await parallel_handoff(orch, [Call("echo", NumIn(n=1)), Call("explode", NumIn(n=8))], NumOut)
    finally:
        await orch.close()
    assert [r.ok for r in results] == [True, False]
    failures = [r for r in handler.records if "failed" in r.getMessage()]
    assert len(failures) == 2
    for record, n in zip(failures, (7, 8)):
        assert record.levelno == logging.WARNING
        assert record.component == "agent-orchestrator"
        assert record.orchestrator == orch.name
        assert record.skill == "explode"
        assert f"exploded on {n}" in record.getMessage()


async def test_json_logs_keep_the_component_orchestrator_and_skill_as_fields(captured):
    orch, _, logger = captured
    stream = io.StringIO()
    json_handler = logging.StreamHandler(stream)
    json_handler.setFormatter(JsonFormatter())
    logger.addHandler(json_handler)
    try:
        orch.set_max_parallel(5)
        await parallel_handoff(orch, [Call("explode", NumIn(n=3))], NumOut)
    finally:
        logger.removeHandler(json_handler)
        await orch.close()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["level"] for line in lines] == ["WARNING", "WARNING"]
    clamp, failure = lines
    assert clamp["component"] == failure["component"] == "agent-orchestrator"
    assert clamp["orchestrator"] == failure["orchestrator"] == orch.name
    assert clamp["skill"] == failure["skill"] == "explode"
    assert failure["message"].startswith("handoff explode failed after")


def test_set_logger_none_keeps_the_current_logger(captured):
    orch, _, _ = captured
    before = orch.handoff_settings().logger
    orch.set_logger(None)
    assert orch.handoff_settings().logger is before
    assert orch.handoff_settings().logger.extra == {"component": "agent-orchestrator", "orchestrator": orch.name}
