"""``SkillRegistry``: typed Python functions served as tools by stateless subagent actors.

A skill is a function from one pydantic input model to one pydantic output model, sync or
async, registered under a name. The registry is itself a ``ToolCaller``: it is pickled into
the subagent actors of each skill's pool and runs the function there, so a handoff is the
same code path whether the actor sits on this node or another.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
from collections.abc import Callable
from typing import Any, get_type_hints

import cloudpickle
from pydantic import BaseModel, ConfigDict, ValidationError

from actors._pickle_check import explain_unpicklable
from actors.exceptions import NotPicklable
from actors.callers.protocol import DEFAULT_RETIRE_AFTER_S, ToolCallResult
from actors.exceptions import SkillRegistrationError

__all__ = ["SkillRegistry", "SkillSpec"]

_log = logging.getLogger(__name__)


async def _run_to_the_end(fn: Callable[..., Any], inp: Any) -> Any:
    """Run a sync skill in a thread and return only once it has returned, even when the
    awaiting task is cancelled meanwhile (the cancellation is then re-raised): a thread
    cannot be interrupted, and whoever awaits this must not believe the body has stopped
    (the subagent gives the body's permit back when this returns)."""
    thread = asyncio.ensure_future(asyncio.to_thread(fn, inp))
    cancelled = False
    while True:
        try:
            out = await asyncio.shield(thread)
            break
        except asyncio.CancelledError:
            if thread.done():
                raise
            cancelled = True  # keep waiting for the thread; cancel once it has returned
    if cancelled:
        raise asyncio.CancelledError
    return out


class SkillSpec(BaseModel):
    """A registered skill: its function, its types and how its subagent pool is sized."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    fn: Callable[..., Any]
    input_type: type[BaseModel]
    output_type: type[BaseModel]
    is_async: bool
    replicas: int
    num_cpus: float


class SkillRegistry:
    """Typed skills by name; a ``ToolCaller`` whose calls run in subagent actors.

    ``replicas`` sizes each skill's pool of subagent actors (slot ``i`` on the ``i``-th alive
    node, round robin); ``num_cpus`` is what each of them reserves.
    ``retire_after_s``: how long a replica stays up with nothing to do before it ends itself
    (default ``DEFAULT_RETIRE_AFTER_S``, so a run loop's next turn finds it warm); a call that
    reaches a retiring replica goes to a new one, unrun there.

    Two registries with the same skills (names, functions, types) and options share their
    subagents: the pools are keyed by a digest of what the registry serves (``pool_key``).
    """

    def __init__(self, *, replicas: int = 4, num_cpus: float = 0.0,
                 retire_after_s: float = DEFAULT_RETIRE_AFTER_S) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be an int >= 1, got {replicas!r}")
        if num_cpus < 0:
            raise ValueError(f"num_cpus must be >= 0, got {num_cpus!r}")
        if isinstance(retire_after_s, bool) or not isinstance(retire_after_s, (int, float)) \
                or not math.isfinite(retire_after_s) or retire_after_s < 0:
            raise ValueError(f"retire_after_s must be a finite number >= 0, got {retire_after_s!r}")
        self._skills: dict[str, SkillSpec] = {}
        self._replicas = replicas
        self._num_cpus = float(num_cpus)
        self._retire_after_s = float(retire_after_s)
        # The digest behind ``pool_key``, computed on first use and again after a registration;
        # it travels with pickles, so every process names the same pools.
        self._pool_key: str | None = None

    @property
    def retire_after_s(self) -> float:
        """Seconds an idle subagent of this registry stays up before it retires."""
        return self._retire_after_s

    @property
    def pool_key(self) -> str:
        """Names this registry's subagent pools in every process: a digest of the skills'
        names, functions and types and of the pool options, so equal registries share them."""
        if self._pool_key is None:
            served = [(spec.name, spec.fn, spec.input_type, spec.output_type, spec.replicas, spec.num_cpus)
                      for spec in sorted(self._skills.values(), key=lambda spec: spec.name)]
            blob = cloudpickle.dumps((served, self._replicas, self._num_cpus, self._retire_after_s))
            self._pool_key = f"skills-{hashlib.sha1(blob).hexdigest()[:16]}"
        return self._pool_key

    def __getstate__(self) -> dict[str, Any]:
        self.pool_key  # computed here, so the unpickled copy names the same pools
        return self.__dict__.copy()

    def skill(
        self, name: str | None = None, *, replicas: int | None = None, num_cpus: float | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn`` under ``name`` (default: its ``__name__``); returns ``fn``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(name or getattr(fn, "__name__", ""), fn, replicas=replicas, num_cpus=num_cpus)
            return fn

        return register

    def register(self, name: str, fn: Callable[..., Any], *, replicas: int | None = None, num_cpus: float | None = None) -> SkillSpec:
        """Register ``fn``; its input and output types come from its annotations."""
        problems: list[str] = []
        if not isinstance(name, str) or not name.strip():
            problems.append(f"the skill name must be a non-empty string, got {name!r}")
        elif name in self._skills:
            problems.append(f"a skill named {name!r} is already registered")
        if not callable(fn):
            raise SkillRegistrationError(f"skill {name!r}: {fn!r} is not callable")
        try:
            hints = get_type_hints(fn)
        except Exception as exc:  # unresolvable forward references
            raise SkillRegistrationError(f"skill {name!r}: cannot read the type annotations of {fn!r}: {exc}") from exc
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        input_type = hints.get(params[0].name) if len(params) == 1 else None
        if len(params) != 1:
            problems.append(f"a skill takes exactly one parameter (its input model), {getattr(fn, '__name__', fn)!r} takes {len(params)}")
        elif not (isinstance(input_type, type) and issubclass(input_type, BaseModel)):
            problems.append(f"the parameter {params[0].name!r} must be annotated with a pydantic model, got {input_type!r}")
        output_type = hints.get("return")
        if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
            problems.append(f"the return annotation must be a pydantic model, got {output_type!r}")
        replicas = self._replicas if replicas is None else replicas
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            problems.append(f"replicas must be an int >= 1, got {replicas!r}")
        if problems:
            raise SkillRegistrationError(f"cannot register skill {name!r}: " + "; ".join(problems))
        unpicklable = explain_unpicklable(fn, f"skill {name!r}")  # it runs in subagent actors, so it travels
        if unpicklable is not None:
            raise NotPicklable(unpicklable)
        spec = SkillSpec(
            name=name,
            fn=fn,
            input_type=input_type,  # type: ignore[arg-type]
            output_type=output_type,  # type: ignore[arg-type]
            is_async=inspect.iscoroutinefunction(fn),
            replicas=replicas,
            num_cpus=self._num_cpus if num_cpus is None else float(num_cpus),
        )
        self._skills[name] = spec
        self._pool_key = None  # what the registry serves changed: so does its key
        return spec

    def names(self) -> list[str]:
        return sorted(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def owns(self, name: str) -> bool:
        return name in self._skills

    @property
    def label(self) -> str:
        """Empty: a registry has no name of its own (a composite names it by type and position)."""
        return ""

    def __len__(self) -> int:
        return len(self._skills)

    def spec(self, name: str) -> SkillSpec | None:
        return self._skills.get(name)

    def interruptible(self, name: str) -> bool:
        """Whether cancelling a call of ``name`` stops its body: async skills yes; sync
        skills run in a thread that cannot be stopped, so they run to their end."""
        spec = self._skills.get(name)
        return spec is None or spec.is_async

    def pool_options(self, name: str) -> tuple[int, float]:
        """``(replicas, num_cpus)`` of the named skill's subagent pool."""
        spec = self._skills.get(name)
        if spec is None:
            return self._replicas, self._num_cpus
        return spec.replicas, spec.num_cpus

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Run a skill here and now (inside a subagent actor, normally).

        Unknown skills, invalid input and exceptions raised by the skill are tool errors
        (``is_error``), with a message naming the skill.
        """
        spec = self._skills.get(name)
        if spec is None:
            known = ", ".join(self.names()) or "none"
            return ToolCallResult.error(f"unknown skill {name!r}; registered skills: {known}")
        try:
            inp = spec.input_type.model_validate(arguments)
        except ValidationError as exc:
            return ToolCallResult.error(f"invalid input for skill {name!r}: {exc}")
        try:
            if spec.is_async:
                out = await spec.fn(inp)
            else:
                out = await _run_to_the_end(spec.fn, inp)
        except Exception as exc:
            _log.warning("skill %s raised %s: %s", name, type(exc).__name__, exc, extra={"component": "subagent", "skill": name})
            return ToolCallResult.error(f"skill {name!r} raised {type(exc).__name__}: {exc}")
        if not isinstance(out, spec.output_type):
            try:
                out = spec.output_type.model_validate(out)
            except ValidationError as exc:
                return ToolCallResult.error(f"skill {name!r} returned a value that is not a {spec.output_type.__name__}: {exc}")
        return ToolCallResult.of_json(out)
