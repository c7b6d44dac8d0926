"""Model requests as journalled steps: a handoff to a model subagent, committed before use.

The model subagent is a skill whose body runs the SDK's own ``Model`` inside a replica, so
every model the SDK supports works unchanged: the replica builds it with the user's
``model_factory(name)``, or from the SDK's default provider (its environment's
``OPENAI_API_KEY``, ``OPENAI_BASE_URL``...) for a model given by name, or unpickles the
agent's ``Model`` object. ``SoloistModel`` stands in for each agent's model in the driver:
inside a durable run each ``get_response`` is step ``model:<n>``, answered from the journal
when committed, else handed off under the run's cap and committed through the run's single
writer before the agent reads it. The model subagent reports each response's usage
(``report_usage``): the token metrics, the run's tokens, and the settling of the handoff's
permit when its scope has a budget.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import cloudpickle
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.models.multi_provider import MultiProvider
from agents.tool import FunctionTool, Tool
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from actors.agents._durable_errors import DurableAgentConfigError, JournalMismatch, StepNotJournalable
from actors.agents._steps import StepRecord, current_steps
from actors.callers.skills import SkillRegistry
from actors.handoffs.api import Call, handoff
from cluster.semaphore import TokenUsage, report_usage

__all__ = ["MODEL_SKILL_PREFIX", "ModelFactory", "ModelRef", "ModelStepInput", "ModelStepOutput", "SoloistModel",
           "model_registry"]

#: The model subagent's skill is ``MODEL_SKILL_PREFIX + <runner name>``.
MODEL_SKILL_PREFIX = "openai_agents.model."

#: Builds, in a replica, the model an agent names (its model string, None for the default).
ModelFactory = Callable[[str | None], Model]

_RESPONSE = TypeAdapter(ModelResponse)


class ModelRef(BaseModel):
    """Which model a request goes to: a name (the replica's factory or the SDK's default
    provider builds it), or the agent's own ``Model`` object, pickled (``blob``)."""

    name: str | None = None
    blob: str | None = None


class ModelStepInput(BaseModel):
    """One request, as the model subagent takes it: what the SDK gave ``get_response``. The
    conversation (``input``) is the transport of one request, never journalled; tools,
    handoffs and the output schema travel as their schemas (their bodies stay in the driver);
    the settings travel pickled (they may hold values JSON cannot carry)."""

    model: ModelRef
    system_instructions: str | None = None
    input: str | list[Any]
    settings: str
    tools: list[dict[str, Any]]
    output_schema: dict[str, Any] | None = None
    handoffs: list[dict[str, Any]]
    tracing: int = ModelTracing.DISABLED.value
    previous_response_id: str | None = None
    conversation_id: str | None = None
    prompt: dict[str, Any] | None = None


class ModelStepOutput(BaseModel):
    """The model's response, as the journal keeps it (``dump_response``)."""

    response: dict[str, Any]


def _pickled(value: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(value)).decode()


def _unpickled(text: str) -> Any:
    return cloudpickle.loads(base64.b64decode(text))


def dump_response(response: ModelResponse) -> dict[str, Any]:
    """A response as the JSON the journal keeps: the output items with the fields the model
    set (by alias, as the SDK sends them back), the usage, the ids; checked to read back as
    the same response, else whole."""
    dumped: dict[str, Any] = {
        "output": [item.model_dump(mode="json", by_alias=True, exclude_unset=True) for item in response.output],
        "usage": _RESPONSE.dump_python(response, mode="json", by_alias=True)["usage"],
        "response_id": response.response_id,
    }
    if response.request_id is not None:
        dumped["request_id"] = response.request_id
    if response.raw_usage is not None:
        dumped["raw_usage"] = response.raw_usage
    if load_response(dumped) != response:
        dumped = _RESPONSE.dump_python(response, mode="json", by_alias=True)
    return dumped


def load_response(data: Any) -> ModelResponse:
    return _RESPONSE.validate_python(data)


# --- what travels to the replica: the schemas of tools, handoffs and the output ---------------


async def _runs_in_the_driver(*_: Any) -> Any:
    raise RuntimeError("a tool or handoff runs in the driver, never in the model subagent")


def _tool_spec(tool: Tool) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        return {"function": {"name": tool.name, "description": tool.description,
                             "params_json_schema": tool.params_json_schema,
                             "strict_json_schema": tool.strict_json_schema, "defer_loading": tool.defer_loading,
                             "namespace": tool._tool_namespace,
                             "namespace_description": tool._tool_namespace_description}}
    try:  # a hosted tool (web search, file search...) is data: it travels as it is
        return {"pickled": _pickled(tool)}
    except (TypeError, AttributeError, ValueError) as exc:
        raise StepNotJournalable(f"the tool {getattr(tool, 'name', type(tool).__name__)!r} ({type(tool).__name__}) "
                                 f"cannot be sent to the model subagent ({exc}); give the agent tools that pickle") from exc


def _tool_from(spec: dict[str, Any]) -> Tool:
    if "pickled" in spec:
        tool: Tool = _unpickled(spec["pickled"])
        return tool
    f = spec["function"]
    return FunctionTool(name=f["name"], description=f["description"], params_json_schema=f["params_json_schema"],
                        on_invoke_tool=_runs_in_the_driver, strict_json_schema=f["strict_json_schema"],
                        defer_loading=f["defer_loading"], _tool_namespace=f["namespace"],
                        _tool_namespace_description=f["namespace_description"])


def _handoff_spec(h: Handoff[Any, Any]) -> dict[str, Any]:
    return {"tool_name": h.tool_name, "tool_description": h.tool_description, "input_json_schema": h.input_json_schema,
            "agent_name": h.agent_name, "strict_json_schema": h.strict_json_schema}


def _handoff_from(spec: dict[str, Any]) -> Handoff[Any, Any]:
    return Handoff(tool_name=spec["tool_name"], tool_description=spec["tool_description"],
                   input_json_schema=spec["input_json_schema"], on_invoke_handoff=_runs_in_the_driver,
                   agent_name=spec["agent_name"], strict_json_schema=spec["strict_json_schema"])


class _OutputSchema(AgentOutputSchemaBase):
    """The agent's output schema in the replica: what the model is told (validation of the
    answer happens in the driver, by the agent's own schema)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._spec = spec

    def is_plain_text(self) -> bool:
        return bool(self._spec["plain_text"])

    def name(self) -> str:
        return str(self._spec["name"])

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = self._spec["json_schema"] or {}
        return schema

    def is_strict_json_schema(self) -> bool:
        return bool(self._spec["strict"])

    def validate_json(self, json_str: str) -> Any:
        raise RuntimeError("the answer is validated in the driver, never in the model subagent")


def _schema_spec(schema: AgentOutputSchemaBase | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    plain = schema.is_plain_text()
    return {"plain_text": plain, "name": schema.name(), "json_schema": None if plain else schema.json_schema(),
            "strict": schema.is_strict_json_schema()}


# --- the replica's side ----------------------------------------------------------------------------


class ModelSource:
    """Builds the models a replica runs, once per process and model: ``factory(name)`` when
    the runner was given one, the agent's pickled ``Model`` for a ref that carries one, else
    the SDK's default provider (configured by the replica's environment)."""

    def __init__(self, factory: ModelFactory | None) -> None:
        # The factory travels as cloudpickle's bytes (by value where the user registered its
        # module so), whatever pickler carries the source to the replicas.
        self._factory_blob = cloudpickle.dumps(factory) if factory is not None else b""
        self._factory: ModelFactory | None = factory  # unpickled on first use in a replica
        self._built: dict[tuple[str | None, str], Model] = {}  # this process's models (never pickled)
        self._provider: MultiProvider | None = None

    def get(self, ref: ModelRef) -> Model:
        digest = hashlib.sha1(ref.blob.encode()).hexdigest() if ref.blob is not None else ""
        key = (ref.name, digest)
        model = self._built.get(key)
        if model is None:
            if self._factory_blob:
                if self._factory is None:
                    self._factory = cloudpickle.loads(self._factory_blob)
                assert self._factory is not None
                model = self._factory(ref.name)
            elif ref.blob is not None:
                model = _unpickled(ref.blob)
            else:
                self._provider = self._provider or MultiProvider()
                model = self._provider.get_model(ref.name)
            self._built[key] = model
        return model

    def __getstate__(self) -> dict[str, Any]:
        return {"_factory_blob": self._factory_blob, "_factory": None, "_built": {}, "_provider": None}


async def run_request(source: ModelSource, inp: ModelStepInput) -> ModelStepOutput:
    """The model subagent's body: one request to the SDK's own model, in the replica."""
    model = source.get(inp.model)
    name = inp.model.name or str(getattr(model, "model", "") or "")
    prompt: Any = inp.prompt
    try:
        response = await model.get_response(
            inp.system_instructions, inp.input, _unpickled(inp.settings), [_tool_from(t) for t in inp.tools],
            _OutputSchema(inp.output_schema) if inp.output_schema is not None else None,
            [_handoff_from(h) for h in inp.handoffs], ModelTracing(inp.tracing),
            previous_response_id=inp.previous_response_id, conversation_id=inp.conversation_id, prompt=prompt)
    except Exception:
        report_usage(TokenUsage(model=name), outcome="error")
        raise
    # The usage hook: the token metrics, the run's tokens, and the settling of the handoff's
    # permit when its scope has a budget.
    report_usage(TokenUsage(model=name, input_tokens=response.usage.input_tokens,
                            output_tokens=response.usage.output_tokens))
    return ModelStepOutput(response=dump_response(response))


def model_registry(runner_name: str, source: ModelSource, *, replicas: int = 4) -> SkillRegistry:
    """The registry whose one skill runs ``source``'s models in a replica: the model subagent."""

    # A closure over ``source`` alone: module-level names travel by reference, not by value.
    async def request(inp: ModelStepInput) -> ModelStepOutput:
        return await run_request(source, inp)

    registry = SkillRegistry(replicas=replicas)
    registry.register(MODEL_SKILL_PREFIX + runner_name, request)
    return registry


# --- the driver's side ----------------------------------------------------------------------------


class SoloistModel(Model):
    """An agent's model in the driver: inside a ``SoloistRunner`` run each ``get_response`` is
    a journalled step the model subagent answers; ``model`` is the name the SDK reads its
    default settings by."""

    def __init__(self, ref: ModelRef, *, agent: str, skill: str) -> None:
        self.ref = ref
        self.model = ref.name
        self.agent = agent
        self.skill = skill

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        steps = current_steps()
        if steps is None:
            raise DurableAgentConfigError(
                f"the model of agent {self.agent!r} answers only inside a SoloistRunner run; "
                "run the agent with SoloistRunner.run (or Runner.run with the agent itself)")
        key = steps.next_model_key()
        recorded = steps.recorded(key)
        if recorded is not None:
            if recorded.name and recorded.name != self.agent:
                raise JournalMismatch(
                    f"step {key!r} of run {steps.run_key!r} was committed as a request of agent {recorded.name!r}, "
                    f"but the resumed run asks it of agent {self.agent!r}: the agents or their input changed; "
                    "start a new run id")
            return load_response(recorded.data)
        payload = ModelStepInput(
            model=self.ref, system_instructions=system_instructions, input=to_jsonable_python(input),
            settings=_pickled(model_settings), tools=[_tool_spec(tool) for tool in tools],
            output_schema=_schema_spec(output_schema), handoffs=[_handoff_spec(h) for h in handoffs],
            tracing=tracing.value, previous_response_id=previous_response_id, conversation_id=conversation_id,
            prompt=to_jsonable_python(prompt) if prompt is not None else None)
        try:
            out = await handoff(steps.target, Call(self.skill, payload), ModelStepOutput)
        except BaseException:
            steps.model_request_failed()
            raise
        await steps.commit(StepRecord(key=key, kind="model", name=self.agent, data=out.response))
        return load_response(out.response)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise DurableAgentConfigError(
            f"agent {self.agent!r}: a durable run is not streamed (Runner.run_streamed); use SoloistRunner.run")
        yield  # an async generator, as the SDK expects (never reached)
