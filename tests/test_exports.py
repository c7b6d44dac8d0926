"""Each package's ``__all__`` is exactly its public surface, and DESIGN.md's names are in it."""

from __future__ import annotations

import importlib

import pytest

DESIGN_NAMES = {
    "coordinators": {"TransitionType", "StateTransition", "TransitionBatch", "CoordinatorResult", "Message",
                     "AgentState", "ContextSnapshot", "Coordinator", "TransitionError", "reduce"},
    "actors": {"Orchestrator", "Change", "VersionConflict", "Call", "Result", "handoff", "parallel_handoff",
               "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "ToolCaller", "ToolCallResult", "TextContent",
               "SkillRegistry", "ManagedAgent", "to_stored_record", "to_payload"},
    "cluster": {"connect"},
}


@pytest.mark.parametrize("package", sorted(DESIGN_NAMES))
def test_all_lists_exactly_the_public_names_the_package_defines(package):
    module = importlib.import_module(package)
    public = {name for name in vars(module) if not name.startswith("_")}
    submodules = {name for name, value in vars(module).items() if getattr(value, "__name__", "").startswith(f"{package}.")
                  and type(value).__name__ == "module"}
    assert set(module.__all__) == public - submodules
    assert len(module.__all__) == len(set(module.__all__))


@pytest.mark.parametrize("package", sorted(DESIGN_NAMES))
def test_the_design_contracts_names_are_exported(package):
    module = importlib.import_module(package)
    assert DESIGN_NAMES[package] <= set(module.__all__)


def test_both_parallel_caps_are_four():
    from actors import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL

    assert DEFAULT_MAX_PARALLEL == HARD_MAX_PARALLEL == 4
