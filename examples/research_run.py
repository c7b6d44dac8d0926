"""A research run of four pydantic-ai agents, durable on soloist, with one approval.

- ``triage`` reads the topic and consults two specialists with two tool calls of one
  response, which pydantic-ai runs at the same time; each call runs a specialist agent;
- ``historian`` and ``economist`` each look something up (a tool) and answer;
- ``triage`` then hands the findings to ``writer``, whose ``publish`` tool needs approval
  (``requires_approval=True``): the writer stops, and the run waits for a person.

The agents are plain pydantic-ai agents; ``SoloistAgent`` makes every model request and
every tool call of each of them a journalled step of one soloist run (``research.<run id>``),
so running the script again with the same ``--run-id`` and ``--store`` sends no committed
request and runs no committed tool again. Offline (the default) the models are scripted
``FunctionModel``s; with ``SOLOIST_LLM_BASE_URL`` and ``SOLOIST_LLM_MODEL`` set (and
``OPENAI_API_KEY`` if the endpoint wants one) every agent talks to that endpoint instead.

Run it whole (the approval is given from this script)::

    python examples/research_run.py --offline

or stop at the approval, answer it as a person would, and run it again to publish::

    python examples/research_run.py --store /tmp/runs.sqlite --run-id r1 --stop-at-approval
    soloist approve research.r1 research.r1/i1 --store /tmp/runs.sqlite
    python examples/research_run.py --store /tmp/runs.sqlite --run-id r1

``--ledger FILE`` gets a line per request the offline models really receive (written in the
model subagents' replicas), to count them; ``--published FILE`` is where ``publish`` writes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from actors import LlmConfig, Orchestrator, OrchestratorNotFound, answer_interrupt, read_record
from actors.pydantic_ai import AgentJournal, SoloistAgent
from cluster import connect

Specialist = Literal["historian", "economist"]
SPECIALISTS: tuple[Specialist, ...] = ("historian", "economist")

#: What the specialists' ``lookup`` tool knows (a stand-in for a search index).
NOTES = {
    "historian": "The first commercial jet airliner, the de Havilland Comet, flew passengers in 1952.",
    "economist": "Jet fuel is about a quarter of an airline's operating costs.",
}


# --- the offline models: scripted FunctionModels, run inside the model subagents' replicas ---


def _log(ledger: str, line: str) -> None:
    if ledger:
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def _responses(messages: list[ModelMessage]) -> int:
    return sum(1 for message in messages if message.kind == "response")


def _prompt(messages: list[ModelMessage]) -> str:
    return next(str(part.content) for message in messages for part in message.parts if isinstance(part, UserPromptPart))


def _returns(messages: list[ModelMessage]) -> list[str]:
    return [str(part.content) for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]


def triage_model(messages: list[ModelMessage], info: AgentInfo, *, ledger: str) -> ModelResponse:
    """Consult both specialists at once, then hand their findings to the writer, then report."""
    n = _responses(messages)
    _log(ledger, f"model triage {n}")
    topic = _prompt(messages)
    if n == 0:
        return ModelResponse(parts=[
            ToolCallPart("consult", {"specialist": "historian", "question": f"How did {topic} begin?"},
                         tool_call_id="ask-historian"),
            ToolCallPart("consult", {"specialist": "economist", "question": f"What does {topic} cost?"},
                         tool_call_id="ask-economist"),
        ])
    if n == 1:
        notes = "\n".join(_returns(messages))
        return ModelResponse(parts=[ToolCallPart("write", {"notes": notes}, tool_call_id="write")])
    return ModelResponse(parts=[TextPart(f"triage: 2 findings on {topic!r}; writer says: {_returns(messages)[-1]}")])


async def specialist_model(messages: list[ModelMessage], info: AgentInfo, *, role: str, ledger: str,
                           meeting: str) -> ModelResponse:
    """Look the question up, then answer from the note. The first request waits until the other
    specialist's first request has arrived too: both can only answer if they were asked at the
    same time, which is what makes the parallel consultation visible offline."""
    n = _responses(messages)
    _log(ledger, f"model {role} {n}")
    if n == 0:
        Path(meeting, role).touch()
        others = [Path(meeting, other) for other in SPECIALISTS if other != role]
        for _ in range(6000):  # at most two minutes: a bound for a broken run, not a pace
            if all(other.exists() for other in others):
                break
            await asyncio.sleep(0.02)
        else:
            return ModelResponse(parts=[TextPart(f"{role}: asked alone, no answer")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"subject": _prompt(messages)}, tool_call_id=f"{role}-lookup")])
    return ModelResponse(parts=[TextPart(f"{role}: {_returns(messages)[-1]}")])


def writer_model(messages: list[ModelMessage], info: AgentInfo, *, ledger: str) -> ModelResponse:
    """Draft a post from the notes and publish it; then say what became of it."""
    n = _responses(messages)
    _log(ledger, f"model writer {n}")
    if n == 0:
        body = " ".join(line.split(": ", 1)[-1] for line in _prompt(messages).splitlines()[1:] if line)
        return ModelResponse(parts=[ToolCallPart("publish", {"title": "Jets", "body": body}, tool_call_id="publish")])
    return ModelResponse(parts=[TextPart(f"done: {_returns(messages)[-1]}")])


def endpoint_model(config: LlmConfig) -> Model:
    """The endpoint's model, built in each model subagent's replica (it holds a client, which
    does not travel): pydantic-ai's OpenAI-compatible chat model."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    key = config.api_key.get_secret_value() if config.api_key is not None else "no-key"
    return OpenAIChatModel(config.model, provider=OpenAIProvider(base_url=config.base_url, api_key=key))


# --- the agents: plain pydantic-ai agents --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Research:
    """What the tools need: the run they belong to and where ``publish`` writes."""

    run_id: str
    published: Path


@dataclasses.dataclass(frozen=True)
class Team:
    """The four agents, each wrapped by ``SoloistAgent`` to live in the one run ``orch``."""

    triage: SoloistAgent[Research, str]
    specialists: dict[str, SoloistAgent[None, str]]
    writer: SoloistAgent[Research, str | DeferredToolRequests]


def notes_of(role: str) -> Callable[[str], str]:
    """The specialist's ``lookup`` tool."""

    def lookup(subject: str) -> str:
        """Look a subject up in the specialist's notes."""
        return NOTES[role]

    return lookup


def writer_run_id(run_id: str, tool_call_id: str) -> str:
    return f"{run_id}-writer-{tool_call_id}"


@dataclasses.dataclass(frozen=True)
class Models:
    """Where the agents' models come from: ``scripted`` (offline) gives each agent its own
    ``FunctionModel``; else ``factory`` builds the endpoint's model in each model subagent."""

    scripted: dict[str, FunctionModel] | None = None
    factory: Callable[[], Model] | None = None


def build_team(orch: Orchestrator[AgentJournal], models: Models) -> Team:
    """The agents as anyone would write them, each wrapped to live in the run ``orch``."""

    def agent(name: str, **definition: Any) -> Agent[Any, Any]:
        return Agent(models.scripted[name] if models.scripted else None, name=name, **definition)

    def durable(agent: Agent[Any, Any]) -> SoloistAgent[Any, Any]:
        return SoloistAgent(agent, orchestrator=orch, replicas=1, model_factory=models.factory)

    specialists: dict[str, SoloistAgent[None, str]] = {}
    for role in SPECIALISTS:
        specialist = agent(role, instructions=f"You are a {role}. Call lookup once, then answer in one sentence.",
                           tools=[notes_of(role)])
        specialists[role] = durable(specialist)

    writer = agent("writer", deps_type=Research, output_type=[str, DeferredToolRequests],
                   instructions="Write a three-sentence post from the notes and publish it with the publish tool "
                                "(once); then say in one line what was published.")

    @writer.tool(requires_approval=True)
    def publish(ctx: RunContext[Research], title: str, body: str) -> str:
        """Publish the post (a side effect a person approves first)."""
        with ctx.deps.published.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"title": title, "body": body}) + "\n")
        return f"published {title!r} ({len(body)} characters) to {ctx.deps.published.name}"

    durable_writer = durable(writer)

    triage = agent("triage", deps_type=Research,
                   instructions="Consult the historian and the economist in one response (two consult calls), "
                                "then call write once with their findings, then report in one line.")

    @triage.tool
    async def consult(ctx: RunContext[Research], specialist: Specialist, question: str) -> str:
        """Ask a specialist agent a question: a run of that agent, journalled in this run."""
        answer = await specialists[specialist].run(question, run_id=f"{ctx.deps.run_id}-{ctx.tool_call_id}")
        return answer.output

    @triage.tool
    async def write(ctx: RunContext[Research], notes: str) -> str:
        """Have the writer turn the notes into a post and publish it."""
        assert ctx.tool_call_id is not None
        done = await durable_writer.run(_writer_prompt(notes), deps=ctx.deps,
                                        run_id=writer_run_id(ctx.deps.run_id, ctx.tool_call_id))
        if isinstance(done.output, DeferredToolRequests):
            return f"the post waits for a person to approve {len(done.output.approvals)} publish call(s)"
        return done.output

    return Team(durable(triage), specialists, durable_writer)


def _writer_prompt(notes: str) -> str:
    return "Notes:\n" + notes


def offline_models(ledger: str, meeting: str) -> Models:
    """Scripted models: ``ledger`` gets a line per request each receives."""
    functions: dict[str, Any] = {
        "triage": functools.partial(triage_model, ledger=ledger),
        "writer": functools.partial(writer_model, ledger=ledger),
        **{role: functools.partial(specialist_model, role=role, ledger=ledger, meeting=meeting) for role in SPECIALISTS},
    }
    return Models(scripted={name: FunctionModel(function, model_name=f"scripted-{name}")
                            for name, function in functions.items()})


def endpoint_models(config: LlmConfig) -> Models:
    """Every agent on the endpoint of ``config``, each replica building its own client."""
    return Models(factory=functools.partial(endpoint_model, config))


# --- the driver -------------------------------------------------------------------------------


def write_call(messages: list[ModelMessage]) -> ToolCallPart | None:
    """The triage's call of ``write`` (its notes are the writer's prompt, its id names the writer's run)."""
    return next((part for message in messages for part in message.parts
                 if isinstance(part, ToolCallPart) and part.tool_name == "write"), None)


async def open_research(name: str, store: str | None) -> Orchestrator[AgentJournal]:
    """The run ``name``: taken up again from ``store`` when it is there, else a new one."""
    if store is not None:
        try:
            return await asyncio.to_thread(Orchestrator.attach, name, store=store)
        except OrchestratorNotFound:
            pass
    return await Orchestrator.open(AgentJournal(), name=name, store=store, checkpoint_every=0)


async def print_steps(orch: Orchestrator[AgentJournal]) -> None:
    state = await orch.snapshot()
    for run_key in sorted(state.runs):
        print(f"  {run_key}: {' '.join(step.key for step in state.runs[run_key])}")


async def main(topic: str, run_id: str, store: str | None, models: Models, published: Path,
               stop_at_approval: bool) -> int:
    connect()
    name = f"research.{run_id}"
    orch = await open_research(name, store)
    try:
        team = build_team(orch, models)
        research = Research(run_id=run_id, published=published)
        triaged = await team.triage.run(topic, deps=research, run_id=run_id)
        print(triaged.output)
        print("steps:")
        await print_steps(orch)

        call = write_call(triaged.all_messages())
        if call is None:
            print("the triage did not call the writer")
            return 1
        writer_id = writer_run_id(run_id, call.tool_call_id)
        record = read_record(await orch.snapshot())
        for interrupt in record.interrupts.values() if record is not None else ():
            print(f"approval {interrupt.id} ({interrupt.status}): {json.dumps(interrupt.question)}")
            if interrupt.is_open:
                if stop_at_approval:
                    print(f"answer with: soloist approve {name} {interrupt.id}" + (f" --store {store}" if store else ""))
                    return 3
                await answer_interrupt(orch, interrupt.id, approve=True, reason="reads well")  # a person would decide
                print(f"approved {interrupt.id}")

        answers = await team.writer.deferred_tool_results(writer_id)
        if answers is None:
            print("nothing waits for approval")
            return 1
        # The writer's first run again (answered from the journal), then on with the answers.
        drafted = await team.writer.run(_writer_prompt(call.args_as_dict()["notes"]), deps=research, run_id=writer_id)
        done = await team.writer.run(deps=research, run_id=f"{writer_id}-answered",
                                     message_history=drafted.all_messages(), deferred_tool_results=answers)
        print(f"writer: {done.output}")
        print("steps:")
        await print_steps(orch)
        return 0
    finally:
        await orch.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="jet travel", help="what to research")
    parser.add_argument("--run-id", default=None, help="the run's id (default: a new one); the same id resumes it")
    parser.add_argument("--store", default=None, help="a SQLite file to keep the run in (needed to resume later)")
    parser.add_argument("--offline", action="store_true",
                        help="scripted models even when SOLOIST_LLM_BASE_URL is set")
    parser.add_argument("--ledger", default="", help="append a line per request the offline models receive")
    parser.add_argument("--published", default=None, help="the file publish appends the post to")
    parser.add_argument("--stop-at-approval", action="store_true", help="exit (code 3) when the run waits for approval")
    args = parser.parse_args()
    run_id = args.run_id or uuid.uuid4().hex[:8]
    if args.offline or not os.environ.get("SOLOIST_LLM_BASE_URL"):
        print(f"research run research.{run_id} on scripted models (offline)")
        chosen = offline_models(args.ledger, tempfile.mkdtemp(prefix="research-meeting-"))
    else:
        config = LlmConfig.from_env()  # SOLOIST_LLM_BASE_URL, SOLOIST_LLM_MODEL, OPENAI_API_KEY
        print(f"research run research.{run_id} on {config.model} at {config.base_url}")
        chosen = endpoint_models(config)
    published = Path(args.published) if args.published else Path(tempfile.mkdtemp(prefix="research-")) / "posts.jsonl"
    sys.exit(asyncio.run(main(args.topic, run_id, args.store, chosen, published, args.stop_at_approval)))
