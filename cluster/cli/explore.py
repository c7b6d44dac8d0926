"""The main job: a multi-agent exploration run over a code base (``soloist run``).

Wires the four built-in coordinators, the code skills and one orchestrator together and
drives them with the public ``Run`` API (the exploration is one user of it, nothing more).
Library code, so the command line stays a thin shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from actors import (DEFAULT_MAX_PARALLEL, Orchestrator, Run, RunEvent, RunOutcome, SkillRegistry, coordinators_started_ahead,
                    pool_for)
from actors.builtin import CODE_SKILLS, exploration_registry
from actors import CompositeCaller, LlmCaller
from coordinators import AgentState, TransitionBatch
from coordinators.builtin import DEFAULT_FIRST, default_coordinators
from coordinators.builtin.model import llm_coordinators

__all__ = ["ExplorationRun", "code_skill_registry", "explore", "resume_run"]


class ExplorationRun(BaseModel):
    """A finished exploration: which run it was and how it ended."""

    model_config = ConfigDict(frozen=True)

    run: str
    task: str
    root: str
    store: str | None
    outcome: RunOutcome
    startup_seconds: float | None = None
    """From the command's start to a connected Ray (set by the command line)."""
    cluster: str | None = None
    """How the run reached Ray: "embedded", "soloist up" (joined that cluster) or "address"."""
    cluster_address: str | None = None


def code_skill_registry(*, replicas: int = 4) -> SkillRegistry:
    """A registry serving the code skills (``search_code``, ``list_tree``, ``read_excerpt``,
    ``python_imports``, ``find_importers``) from one pool that keeps a replica up
    (``actors.builtin.exploration_registry``) and grows to ``replicas`` under load."""
    return exploration_registry(replicas=replicas)


def _start_pools(caller: Any) -> None:
    """Create the pools that will serve the code skills for ``caller``: each starts the
    replica its policy keeps (or finds it up), in a thread of its own, while the run starts."""
    for name in CODE_SKILLS:
        pool_for(caller, name)


async def explore(
    task: str,
    root: str | os.PathLike[str],
    *,
    name: str | None = None,
    store: str | None = None,
    durability: str = "sync",
    max_turns: int = 40,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    on_event: Callable[[RunEvent], None] | None = None,
    on_start: Callable[[Orchestrator[Any]], None] | None = None,
    llm: Any = None,
) -> ExplorationRun:
    """Explore ``root`` for ``task`` with the built-in coordinators; return how it ended.

    With ``llm`` (an ``actors.callers.llm.LlmConfig``) the model classifies the task and narrates the
    summary (``coordinators.builtin.model``); without it the run is fully offline.
    """
    if not isinstance(task, str) or not task.strip():
        raise ValueError("the task must be a non-empty string, e.g. \"where is `connect` defined?\"")
    real_root = os.path.realpath(os.fspath(root))
    if not os.path.isdir(real_root):
        raise ValueError(f"--root {os.fspath(root)!r} is not a directory")
    caller: Any = code_skill_registry()
    if llm is not None:
        caller = CompositeCaller(caller, LlmCaller(llm))
        coordinators = {c.name: c for c in llm_coordinators()}
    else:
        coordinators = {c.name: c for c in default_coordinators()}
    # What the run will wait for starts now, side by side, instead of one after another on its
    # path: the coordinators' actor (before the orchestrator: it needs nothing of the run, and
    # its process starts while the orchestrator's host starts or answers), then the code
    # skills' pool and the run's semaphore scope (each a process to start on a fresh cluster),
    # while the run makes its first writes. (The pool after the orchestrator, whose host the
    # very first write needs, and which has its records follow the replicas this process creates.)
    with coordinators_started_ahead(coordinators.values()):
        orch = Orchestrator(AgentState(), caller=caller, name=name, store=store,
                            durability=durability, max_parallel=max_parallel)
        pools = asyncio.get_running_loop().run_in_executor(None, _start_pools, caller)
        joined = asyncio.ensure_future(orch.join_semaphore())  # the run's first handoff joins it anyway
        try:
            if on_start is not None:
                on_start(orch)
            await orch.apply_batch(
                TransitionBatch()
                .update_state("root", real_root)
                .add_message({"role": "user", "content": task})
            )
            run = Run(orch, coordinators, first=DEFAULT_FIRST, fallback="coordination", vetting="safety",
                      max_turns=max_turns, on_event=on_event)
            outcome = await run.run(task)
        finally:
            try:
                # Done by now, unless the run ended before its first handoff. Their errors are
                # reported where they matter: by that handoff, which joins and picks again.
                for started in (joined, pools):
                    with contextlib.suppress(Exception):
                        await started
            finally:
                await orch.close()
    return ExplorationRun(run=orch.name, task=task, root=real_root, store=store, outcome=outcome)


async def resume_run(
    name: str,
    store: str,
    *,
    durability: str | None = None,
    max_turns: int | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
) -> ExplorationRun:
    """Continue a stored run (any run started by ``Run.run``, the exploration included) from
    exactly where it stopped: after approvals were answered, or after its driver died."""
    orch = Orchestrator.attach(name, store=store, durability=durability)
    try:
        run = await Run.restore(orch, on_event=on_event, max_turns=max_turns)
        outcome = await run.resume()
        ctx = await orch.context()
        record = ctx.get_state("soloist.run") or {}
        task = str(record.get("message", ""))
        root = str(ctx.get_state("root", "") or "")
    finally:
        await orch.close()
    return ExplorationRun(run=name, task=task, root=root, store=store, outcome=outcome)
