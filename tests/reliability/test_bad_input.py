"""Bad input, generated with hypothesis: every way in is checked, and nothing changes on error.

- random transition batches (valid and invalid mixed) through ``reduce``: all or nothing,
  the input state untouched, the only error ``TransitionError`` with the failing index;
- random junk as transition data: a ``ValueError`` naming the type at creation, or a valid
  transition;
- the same batches through a live orchestrator's ``apply_batch``: version and state
  unchanged on every error;
- junk handoff input and junk tool output: a clear, typed error naming the skill, and the
  run's version unchanged;
- state models that are not JSON-clean: ``TypeError`` at construction, and an ``apply`` that
  would make the state unclean is refused with the state unchanged;
- a state larger than the session's object store (300 MB): handled correctly.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticSerializationError

from actors import (
    Call,
    CallerFailed,
    DecodingError,
    HandoffInputError,
    Orchestrator,
    SkillRegistry,
    TextContent,
    ToolCallResult,
    ToolReportedError,
    handoff,
)
from actors import NotJsonClean
from coordinators import AgentState, Message, StateTransition, TransitionError, TransitionType, reduce

pytestmark = pytest.mark.reliability

_JUNK_ATOMS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | st.binary(max_size=4) | st.sampled_from([object(), {1, 2}, 1j, ..., b"\xff"])
)
JUNK = st.recursive(
    _JUNK_ATOMS,
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4) | st.integers() | st.none(), inner, max_size=3),
    max_leaves=6,
)
_FIELDS = st.sampled_from(
    ["message", "messages", "key", "value", "scope", "session_id", "metadata", "tool_name", "arguments",
     "call_id", "output", "is_error", "name", "stage", "role", "content"]
)
JUNK_DATA = st.dictionaries(_FIELDS, JUNK, max_size=4) | JUNK


def _transition(kind: TransitionType, data: Any) -> StateTransition | None:
    """A transition from ``data``, or None when creation refused it (the check under test)."""
    try:
        return StateTransition(kind, data)
    except ValueError as exc:
        assert kind.value in str(exc), f"the error does not name the transition type: {exc}"
        return None


_KEYS = st.sampled_from(["a", "b", "c"])
_IDS = st.sampled_from(["x", "y", "missing"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4,
)
_PLAUSIBLE = st.one_of(
    st.builds(lambda k, v: StateTransition("update_state", {"key": k, "value": v}), _KEYS, _JSON),
    st.builds(lambda k, s: StateTransition("delete_state", {"key": k, "scope": s}), _KEYS, st.sampled_from(["conversation", "session"])),
    st.builds(lambda i: StateTransition("create_session", {"session_id": i}), _IDS),
    st.builds(lambda i: StateTransition("close_session", {"session_id": i}), _IDS),
    st.builds(lambda i: StateTransition("execute_tool", {"tool_name": "t", "arguments": {}, "call_id": i}), _IDS),
    st.builds(lambda i, o: StateTransition("tool_result", {"call_id": i, "output": o}), _IDS, _JSON),
    st.builds(lambda c: StateTransition("add_message", {"message": {"role": "user", "content": c}}), st.text(max_size=3)),
    st.builds(lambda s: StateTransition("update_stage", {"stage": s}), st.sampled_from(["initial", "reading", "complete"])),
)
_FROM_JUNK = st.builds(_transition, st.sampled_from(list(TransitionType)), JUNK_DATA).filter(lambda t: t is not None)
BATCHES = st.lists(_PLAUSIBLE | _FROM_JUNK, max_size=8)

START = reduce(
    AgentState(messages=[Message("user", "hi")], conversation_state={"a": {"n": [1]}}),
    [StateTransition("create_session", {"session_id": "x"}), StateTransition("execute_tool", {"tool_name": "t", "arguments": {}, "call_id": "y"})],
)


# ------------------------------------------------------------------ pure: no Ray


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.sampled_from(list(TransitionType)), JUNK_DATA)
def test_junk_transition_data_is_refused_at_creation_naming_the_type_or_yields_a_json_clean_transition(kind, data):
    transition = _transition(kind, data)
    if transition is not None:
        # what was accepted is JSON-clean and survives a dump/validate round trip unchanged
        dumped = transition.model_dump(mode="json")
        assert StateTransition.model_validate(dumped).model_dump(mode="json") == dumped


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(BATCHES)
def test_random_batches_through_reduce_apply_fully_or_raise_transition_error_with_the_input_untouched(batch):
    before = START.model_dump(mode="json")
    try:
        after = reduce(START, batch)
    except TransitionError as error:
        assert 0 <= error.index < len(batch) and error.transition is batch[error.index]
        assert f"#{error.index}" in str(error) or str(error.index) in str(error)
        reduce(START, batch[: error.index])  # everything before the failing one applies on its own
    else:
        step = START
        for t in batch:
            step = reduce(step, [t])
        assert step.model_dump(mode="json") == after.model_dump(mode="json")
        type(after).model_validate_json(after.model_dump_json())  # the result is JSON-clean
    assert START.model_dump(mode="json") == before


@pytest.mark.parametrize("junk", [42, "text", None, [StateTransition("update_stage", {"stage": "x"}), "nope"], {"a": 1}])
def test_reduce_refuses_a_batch_that_is_not_transitions_and_leaves_the_state_alone(junk):
    before = START.model_dump(mode="json")
    with pytest.raises((TypeError, TransitionError)):
        reduce(START, junk)
    assert START.model_dump(mode="json") == before


# -------------------------------------------------------- through a live run


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the hypothesis examples that talk to a live orchestrator."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def run(ray_module, loop) -> Iterator[Orchestrator[AgentState]]:
    orch: Orchestrator[AgentState] = Orchestrator(START)
    yield orch
    loop.run_until_complete(orch.close())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                                   HealthCheck.function_scoped_fixture])
@given(BATCHES, st.booleans())
def test_random_batches_through_apply_batch_commit_whole_or_leave_version_and_state_unchanged(run, loop, batch, cas):
    async def go() -> None:
        version, before = await run.versioned_snapshot()
        try:
            new_version = await run.apply_batch(batch, expected_version=version if cas else None)
        except TransitionError as error:
            assert 0 <= error.index < len(batch)
            after_version, after = await run.versioned_snapshot()
            assert after_version == version and after.model_dump() == before.model_dump()
        else:
            after_version, after = await run.versioned_snapshot()
            assert new_version == after_version == version + 1
            assert after.model_dump() == reduce(before, batch).model_dump()

    loop.run_until_complete(go())


class AddIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int
    b: int


class AddOut(BaseModel):
    sum: int


def _adder() -> SkillRegistry:
    skills = SkillRegistry(replicas=1)

    @skills.skill("add")
    def add(inp: AddIn) -> AddOut:
        return AddOut(sum=inp.a + inp.b)

    return skills


class EchoCaller:
    """A tool caller that answers with whatever text (or raw object) it is asked to: junk output."""

    pool_key = "reliability-echo"

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if "raw" in arguments:
            return arguments["raw"]
        return ToolCallResult(content=[TextContent(text=arguments["text"])])


@pytest.fixture(scope="module")
def adder(ray_module, loop) -> Iterator[Orchestrator[AgentState]]:
    orch: Orchestrator[AgentState] = Orchestrator(AgentState(), caller=_adder())
    yield orch
    loop.run_until_complete(orch.close())


@pytest.fixture(scope="module")
def echo(ray_module, loop) -> Iterator[Orchestrator[AgentState]]:
    orch: Orchestrator[AgentState] = Orchestrator(AgentState(), caller=EchoCaller())
    yield orch
    loop.run_until_complete(orch.close())


_HANDOFF_INPUT = JUNK | st.dictionaries(st.sampled_from(["a", "b", "c"]), JUNK, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_HANDOFF_INPUT)
def test_junk_handoff_input_fails_with_a_typed_error_naming_the_skill_and_changes_nothing(adder, loop, junk):
    async def go() -> None:
        version = await adder.version()
        try:
            out = await handoff(adder, Call("add", junk), AddOut)
        except (HandoffInputError, ToolReportedError) as error:
            assert error.skill == "add" and "'add'" in str(error)
        else:  # the junk happened to be a valid input
            assert out == AddOut(sum=AddIn.model_validate(junk).a + AddIn.model_validate(junk).b)
        assert await adder.version() == version

    loop.run_until_complete(go())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40) | st.builds(lambda v: str(v), JUNK) | st.sampled_from(['{"sum": 3}', '{"sum": "x"}', "null", "", "[]", "{}"]))
def test_junk_tool_output_text_fails_with_decoding_error_naming_the_skill_and_changes_nothing(echo, loop, text):
    async def go() -> None:
        version = await echo.version()
        try:
            out = await handoff(echo, Call("echo", {"text": text}), AddOut)
        except DecodingError as error:
            assert error.skill == "echo" and "decoding output" in str(error) and "AddOut" in str(error)
        else:
            assert out == AddOut.model_validate_json(text)
        assert await echo.version() == version

    loop.run_until_complete(go())


@pytest.mark.parametrize("raw", [42, "not a result", None, {"content": 5}, {"content": [{"type": "image"}]}, [1, 2]])
def test_a_caller_returning_a_non_result_object_fails_with_caller_failed_and_changes_nothing(echo, loop, raw):
    async def go() -> None:
        version = await echo.version()
        with pytest.raises((CallerFailed, DecodingError), match="'echo'"):
            await handoff(echo, Call("echo", {"raw": raw}), AddOut)
        assert await echo.version() == version

    loop.run_until_complete(go())


# ------------------------------------------------------- unclean and huge states


class Opaque:
    """Not JSON: no pydantic serializer knows it."""


class WithObject(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    thing: Any = Opaque()


class WithNan(BaseModel):
    x: float = math.nan


class WithBytes(BaseModel):
    data: bytes = b"\xff\xfe"


class WithInfinity(BaseModel):
    limits: dict[str, float] = {"hi": math.inf}


class WithAnyNan(BaseModel):
    anything: Any = [math.nan]  # pydantic alone would store this as [null]


@pytest.mark.parametrize("state", [WithObject(), WithNan(), WithBytes(), WithInfinity(), WithAnyNan()], ids=lambda s: type(s).__name__)
def test_a_state_that_is_not_json_clean_is_refused_by_the_constructor_with_type_error(ray_session, state):
    with pytest.raises(TypeError, match=rf"{type(state).__name__} must round-trip through JSON"):
        Orchestrator(state)


class Loose(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=False)
    value: Any = 0


@pytest.mark.parametrize(
    "bad", [math.nan, -math.inf, [1.0, {"deep": math.inf}], Opaque(), b"\xff"], ids=["nan", "-inf", "nested-inf", "object", "bytes"]
)
async def test_an_apply_that_would_make_the_state_unclean_is_refused_and_the_state_is_unchanged(ray_session, bad):
    orch = Orchestrator(Loose())
    try:
        def poison(state: Loose) -> None:
            state.value = bad

        with pytest.raises((ValueError, TypeError, PydanticSerializationError)) as caught:
            await orch.apply(poison)
        if isinstance(bad, (float, list)):
            assert isinstance(caught.value, NotJsonClean) and "Loose.value" in str(caught.value)
        version, state = await orch.versioned_snapshot()
        assert version == 0 and state.value == 0
    finally:
        await orch.close()


async def test_an_apply_commits_the_json_form_it_journals_so_memory_and_store_agree(ray_session):
    orch = Orchestrator(Loose())
    try:
        def put_a_set(state: Loose) -> None:
            state.value = {3, 1, 2}

        assert await orch.apply(put_a_set) == 1
        assert (await orch.snapshot()).value == [1, 2, 3]
    finally:
        await orch.close()


class Big(BaseModel):
    blob: str = ""
    count: int = 0


async def test_a_state_larger_than_the_object_store_round_trips_and_applies_correctly(ray_session):
    size = 320 * 1024 * 1024  # the session's object store holds 300 MB
    orch = Orchestrator(Big(blob="x" * size))
    try:
        def bump(state: Big) -> None:
            state.count += 1

        assert await orch.apply(bump) == 1
        state = await orch.snapshot()
        assert len(state.blob) == size and state.count == 1
    finally:
        await orch.close()
