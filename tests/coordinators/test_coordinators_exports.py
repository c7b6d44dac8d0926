"""The public surface of `coordinators` is exactly the documented names, and Ray-free."""

from __future__ import annotations

import subprocess
import sys

import coordinators
from coordinators import Coordinator, CoordinatorResult, ContextSnapshot

EXPECTED = [
    "TransitionType", "StateTransition", "TransitionBatch", "CoordinatorResult", "Message", "AgentState",
    "ContextSnapshot", "Coordinator", "TransitionError", "SoloistError", "reduce", "PendingToolCall", "Session", "freeze", "thaw",
    "FrozenDict", "FrozenList", "check_json_clean", "shared_records",
]


def test_all_is_exactly_the_public_surface() -> None:
    assert sorted(coordinators.__all__) == sorted(EXPECTED) and len(coordinators.__all__) == len(EXPECTED)
    for name in EXPECTED:
        assert getattr(coordinators, name) is not None


def test_core_imports_no_ray() -> None:
    code = (
        "import sys; import coordinators.reducer, coordinators.snapshot, coordinators.protocol;"
        "sys.exit(1 if 'ray' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


class _Echo:
    name = "echo"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult.no_op(reasoning=message)


async def test_a_class_with_name_and_process_is_a_coordinator() -> None:
    echo = _Echo()
    assert isinstance(echo, Coordinator) and not isinstance(object(), Coordinator)
    result = await echo.process(ContextSnapshot.of(coordinators.AgentState()), "hi")
    assert result.reasoning == "hi"
