"""The four built-in coordinators of a ``soloist run``: classification, exploration, safety,
coordination. Pure: they import only ``coordinators`` and the standard library, read only the
snapshot and the message, and touch no disk, clock or randomness (call ids come from the core).

State conventions (keys in ``conversation_state``; who writes each):

==================  =============================================================  ==============
key                 value                                                          written by
==================  =============================================================  ==============
``root``            str, the tree explored (set by the run before turn 1)          the run
``task``            {type, intents, complexity, keywords, message}                 classification
``files``           path -> FileFact dict (size, is_binary, is_symlink,            exploration
                    symlink_target, escapes_root), from ``list_tree``
``findings``        [{path, line, text, symbol_kind, via}] search hits, ``via``    exploration
                    = the keyword searched
``excerpts``        [{path, start_line, end_line, lines}]                          exploration
``imports``         [{importer, imported, path, line, imported_path}] edges        exploration
                    touching the files involved
``importers``       symbol -> ``find_importers`` answer (kind, modules,            exploration
                    definitions, reexports, importers), the whole import graph
``calls_made``      [tool_name + json.dumps(arguments, sort_keys=True)]            exploration
``planned_calls``   call_id -> {tool_name, arguments} of every call planned        exploration
``digested_calls``  [call_id] of the tool results already folded into state        exploration
``blocked``         [{call_id, tool_name, arguments, reason}]                      safety
``summary``         the final report (see `build_summary`)                         coordination
``trail``           [{coordinator, reasoning}], every coordinator appends          all
==================  =============================================================  ==============

Division of work with the run loop (which someone else owns):

1. The loop runs one coordinator at a time, starting with `DEFAULT_FIRST`, and applies its
   transitions; ``should_continue=False`` stops the run, ``handoff_to`` names the next one
   (when None, run "coordination").
2. Exploration only *requests* calls (``execute_tool``) and hands off to "safety". The loop
   executes the calls still pending **after safety has run** (safety answers the unsafe
   ones with an error ``tool_result``, so they are no longer pending), then applies one
   ``tool_result(call_id, skill_output_dict, is_error)`` per call.
3. The core turns each ``tool_result`` into a ``tool`` message; exploration reads the ones
   whose ``tool_call_id`` is not in ``digested_calls`` and records what they say. Nobody
   else interprets tool output.

Stages: ``initial`` -> ``exploring`` (classification) -> ``reading`` -> ``summarising`` ->
``complete`` (coordination); they never go back.
"""

from __future__ import annotations

from coordinators.builtin._common import CODE_TOOLS, STAGES, call_key
from coordinators.builtin.classification import GENERAL_TASK, TASK_TYPES, ClassificationCoordinator, classify, extract_keywords
from coordinators.builtin.coordination import CoordinationCoordinator, build_summary
from coordinators.builtin.exploration import ExplorationCoordinator, Survey, survey
from coordinators.builtin.safety import DEFAULT_RULES, SafetyContext, SafetyCoordinator, SafetyRule

__all__ = [
    "CODE_TOOLS",
    "ClassificationCoordinator",
    "CoordinationCoordinator",
    "DEFAULT_FIRST",
    "DEFAULT_RULES",
    "ExplorationCoordinator",
    "GENERAL_TASK",
    "STAGES",
    "SafetyContext",
    "SafetyCoordinator",
    "SafetyRule",
    "Survey",
    "TASK_TYPES",
    "build_summary",
    "call_key",
    "classify",
    "default_coordinators",
    "extract_keywords",
    "survey",
]

#: The coordinator a run starts with.
DEFAULT_FIRST = "classification"


def default_coordinators() -> tuple[
    ClassificationCoordinator, ExplorationCoordinator, SafetyCoordinator, CoordinationCoordinator
]:
    """Fresh instances of the four built-ins, in order: classification, exploration, safety,
    coordination."""
    return (
        ClassificationCoordinator(),
        ExplorationCoordinator(),
        SafetyCoordinator(),
        CoordinationCoordinator(),
    )
