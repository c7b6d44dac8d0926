"""What cannot be pickled cannot travel to the cluster: one sentence names it and the fix."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from actors import NotPicklable, Orchestrator, SkillRegistry, ToolCallResult


class In(BaseModel):
    x: int


class Out(BaseModel):
    x: int


def test_a_skill_that_captures_a_lock_is_refused_at_registration_naming_the_lock() -> None:
    lock = threading.Lock()

    def add(inp: In) -> Out:
        with lock:
            return Out(x=inp.x)

    with pytest.raises(NotPicklable) as caught:
        SkillRegistry().register("add", add)
    message = str(caught.value)
    assert message.startswith("skill 'add' cannot be sent to the cluster because it cannot be pickled")
    assert "function add captures 'lock' (a threading.Lock)" in message
    assert "don't capture 'lock' in add" in message
    assert "\n" not in message


@pytest.mark.ray
def test_a_state_model_defined_in_a_function_with_a_lock_local_names_the_class_and_the_local(ray_session: Any) -> None:
    lock = threading.Lock()  # pydantic keeps this function's locals with the class below

    class State(BaseModel):
        n: int = 0

    with pytest.raises(NotPicklable) as caught:
        Orchestrator(State())
    message = str(caught.value)
    assert message.startswith("the initial state cannot be sent to the cluster because it cannot be pickled")
    assert "class State is defined inside" in message and "local 'lock' (a threading.Lock)" in message
    assert "define State at module level, or don't keep 'lock' as a local of" in message
    assert "\n" not in message
    assert lock.acquire(blocking=False)  # the lock itself is untouched


class LockedCaller:
    """A caller holding a lock in an attribute: it cannot travel with the run."""

    def __init__(self) -> None:
        self.guard = threading.Lock()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        raise NotImplementedError


class Plain(BaseModel):
    n: int = 0


@pytest.mark.ray
def test_a_caller_with_a_lock_attribute_names_the_attribute(ray_session: Any) -> None:
    with pytest.raises(NotPicklable) as caught:
        Orchestrator(Plain(), caller=LockedCaller())
    message = str(caught.value)
    assert "the caller.guard (a threading.Lock)" in message
    assert "keep locks, open files, sockets and clients out of it" in message
