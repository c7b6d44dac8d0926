"""Model requests as journalled steps: a handoff to a model subagent, committed before use.

The model subagent is a skill whose body runs the framework's own model object inside a
replica (so ``FunctionModel``, ``TestModel`` and every provider pydantic-ai supports work
unchanged): the model travels there pickled, or is built there by the ``model_factory``
the user gave. ``SoloistModel`` wraps the agent's model in the driver: inside a durable run
each ``request`` is step ``model:<n>``, answered from the journal when committed, else
handed off under the run's cap and committed through the run's single writer. The model
subagent reports each response's usage (``report_usage``): the token metrics, the run's
tokens per agent, and the settling of the handoff's permit when its scope has a budget.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import cloudpickle
from pydantic import BaseModel, TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from actors.callers.skills import SkillRegistry
from actors.handoffs.api import Call, handoff
from cluster.semaphore import TokenUsage, report_usage
from actors.agents._steps import StepRecord, current_steps

__all__ = ["ModelSource", "ModelStepInput", "ModelStepOutput", "SoloistModel", "model_registry", "MODEL_SKILL_PREFIX"]

#: The model subagent's skill is ``MODEL_SKILL_PREFIX + <agent name>``.
MODEL_SKILL_PREFIX = "pydantic_ai.model."

_RESPONSE = TypeAdapter(ModelResponse)
_PARAMETERS = TypeAdapter(ModelRequestParameters)


class ModelStepInput(BaseModel):
    """What a model subagent needs for one request, as JSON: the conversation so far (the
    transport of one request, never journalled), the request parameters, and the settings
    (pickled: they may hold values such as an ``httpx.Timeout`` that JSON cannot carry)."""

    messages: list[Any]
    settings: str | None = None
    parameters: dict[str, Any]


class ModelStepOutput(BaseModel):
    """The model's response, as pydantic-ai's JSON of a ``ModelResponse``."""

    response: dict[str, Any]


class ModelSource:
    """The model a replica runs: the model pickled when the wrapper was built (what the driver
    does with its own copy later, such as the per-run state a model keeps, never travels),
    or a factory called once per replica process (for a model holding clients or secrets
    that must not travel, or that cannot be pickled)."""

    def __init__(self, model: Model | str | None = None, factory: Callable[[], Model] | None = None) -> None:
        self._blob = cloudpickle.dumps(model) if factory is None else b""
        self._factory = factory
        self._built: Model | None = None  # the model this process uses (never pickled)

    def get(self) -> Model:
        if self._built is None:
            self._built = self._factory() if self._factory is not None else infer_model(cloudpickle.loads(self._blob))
        return self._built

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_built"] = None
        return state


def dump_response(response: ModelResponse) -> dict[str, Any]:
    """A response as the JSON the journal keeps: pydantic-ai's own serialisation without the
    fields that are None and the usage counters that are zero (most of a short response's
    bytes), unless that would not read back as the same response: then whole."""
    dumped: dict[str, Any] = _RESPONSE.dump_python(response, mode="json", exclude_none=True)
    usage = dumped.get("usage")
    if isinstance(usage, dict):
        dumped["usage"] = {name: value for name, value in usage.items() if value != 0 and value != {}}
    if _RESPONSE.validate_python(dumped) != response:
        dumped = _RESPONSE.dump_python(response, mode="json")
    return dumped


def _pickled(value: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def _unpickled(text: str) -> Any:
    return cloudpickle.loads(base64.b64decode(text))


def load_response(data: Any) -> ModelResponse:
    return _RESPONSE.validate_python(data)


async def run_request(source: ModelSource, inp: ModelStepInput) -> ModelStepOutput:
    """The model subagent's body: one request to the framework's own model, in the replica."""
    model = source.get()
    messages = ModelMessagesTypeAdapter.validate_python(inp.messages)
    settings = _unpickled(inp.settings) if inp.settings is not None else None
    parameters = _PARAMETERS.validate_python(inp.parameters)
    try:
        response = await model.request(messages, settings, parameters)
    except Exception:
        report_usage(TokenUsage(model=model.model_name), outcome="error")
        raise
    report_usage(TokenUsage(model=response.model_name or model.model_name, input_tokens=response.usage.input_tokens,
                            output_tokens=response.usage.output_tokens))
    return ModelStepOutput(response=dump_response(response))


def model_registry(agent_name: str, source: ModelSource, *, replicas: int = 4) -> SkillRegistry:
    """The registry whose one skill runs ``source``'s model in a replica: the model subagent."""

    # A closure over ``source`` alone: module-level names travel by reference, not by value.
    async def request(inp: ModelStepInput) -> ModelStepOutput:
        return await run_request(source, inp)

    registry = SkillRegistry(replicas=replicas)
    registry.register(MODEL_SKILL_PREFIX + agent_name, request)
    return registry


class SoloistModel(WrapperModel):
    """The agent's model in the driver: metadata (name, profile, request preparation) from
    the wrapped model; inside a durable run, each request a journalled step run by the
    model subagent. Outside one, a plain request."""

    def __init__(self, wrapped: Model | str, *, skill: str) -> None:
        super().__init__(wrapped)
        self.skill = skill

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        steps = current_steps()
        if steps is None:
            return await super().request(messages, model_settings, model_request_parameters)
        key = steps.next_model_key()
        recorded = steps.recorded(key)
        if recorded is not None:
            return load_response(recorded.data)
        payload = ModelStepInput(
            messages=ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
            settings=_pickled(model_settings) if model_settings is not None else None,
            parameters=_PARAMETERS.dump_python(model_request_parameters, mode="json"),
        )
        out = await handoff(steps.target, Call(self.skill, payload), ModelStepOutput)
        await steps.commit(StepRecord(key=key, kind="model", data=out.response))
        return load_response(out.response)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """Inside a durable run a streamed request is a whole step too: the subagent makes it,
        and its committed response is replayed as the stream's events."""
        if current_steps() is None:
            async with super().request_stream(messages, model_settings, model_request_parameters, run_context) as streamed:
                yield streamed
            return
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(response, model_request_parameters=model_request_parameters, replay_events=True)
