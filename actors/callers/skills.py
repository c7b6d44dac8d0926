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
import ray
from pydantic import BaseModel, ConfigDict, ValidationError

from actors._pickle_check import explain_unpicklable
from actors.callers.policy import PoolPolicy, ReplicaResources, check_cluster_has, config_error
from actors.callers.protocol import DEFAULT_RETIRE_AFTER_S, ToolCallResult
from actors.exceptions import NotPicklable, PoolConfigError, SkillRegistrationError

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


def _options(model: BaseModel | None) -> Any:
    """A pool option as plain JSON values (None: not set), the same in every process."""
    return None if model is None else model.model_dump(mode="json")


def _resources_of(where: str, num_cpus: Any, num_gpus: Any, memory: Any, resources: Any) -> ReplicaResources:
    try:
        return ReplicaResources(num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, resources=resources or {})
    except ValidationError as exc:
        raise config_error(where, exc) from None


class SkillSpec(BaseModel):
    """A registered skill: its function, its types and how its subagent pool is sized."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    fn: Callable[..., Any]
    input_type: type[BaseModel]
    output_type: type[BaseModel]
    is_async: bool
    policy: PoolPolicy
    resources: ReplicaResources

    @property
    def replicas(self) -> int:
        """The most replicas its pool holds (``policy.max_replicas``)."""
        return self.policy.max_replicas

    @property
    def num_cpus(self) -> float:
        return self.resources.num_cpus


class SkillRegistry:
    """Typed skills by name; a ``ToolCaller`` whose calls run in subagent actors.

    Each skill has a pool of subagent actors. ``policy`` (a ``PoolPolicy``) sizes every
    skill's pool by its load, from ``min_replicas`` to ``max_replicas``; or ``replicas=n``
    alone: up to ``n`` replicas, one call each, none kept once idle for ``retire_after_s``
    (default ``DEFAULT_RETIRE_AFTER_S``, so a run loop's next turn finds it warm). Neither:
    ``replicas=4``. ``num_cpus``, ``num_gpus``, ``memory`` (bytes) and ``resources`` (custom
    Ray resources) are what each replica reserves: it goes only to a node that has them.
    ``register`` (and ``skill``) take the same options per skill. A call that reaches a
    retiring replica goes to another one, unrun there.

    Bad options raise ``PoolConfigError`` naming the field, and so does a resource that no
    node of the cluster has (checked at registration when Ray is up, else at first use).

    Two registries with the same skills (names, functions, types) and options share their
    subagents: the pools are keyed by a digest of what the registry serves (``pool_key``).
    """

    def __init__(self, *, replicas: int | None = None, policy: PoolPolicy | None = None, num_cpus: float = 0.0,
                 num_gpus: float = 0.0, memory: int = 0, resources: dict[str, float] | None = None,
                 retire_after_s: float = DEFAULT_RETIRE_AFTER_S) -> None:
        if isinstance(retire_after_s, bool) or not isinstance(retire_after_s, (int, float)) \
                or not math.isfinite(retire_after_s) or retire_after_s < 0:
            raise PoolConfigError(f"retire_after_s must be a finite number >= 0, got {retire_after_s!r}")
        self._retire_after_s = float(retire_after_s)
        self._skills: dict[str, SkillSpec] = {}
        self._policy = self._policy_of("the registry", replicas, policy, 4)
        self._resources = _resources_of("the registry", num_cpus, num_gpus, memory, resources)
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
            # The options as JSON, not pickled models: a model pickles its set of fields, whose
            # order follows each process's string hashing, and equal registries in two
            # processes then named different pools (their replicas were never shared).
            served = [(spec.name, spec.fn, spec.input_type, spec.output_type, _options(spec.policy), _options(spec.resources))
                      for spec in sorted(self._skills.values(), key=lambda spec: spec.name)]
            blob = cloudpickle.dumps((served, _options(self._policy), _options(self._resources), self._retire_after_s))
            self._pool_key = f"skills-{hashlib.sha1(blob).hexdigest()[:16]}"
        return self._pool_key

    @property
    def pickle_key(self) -> str:
        """What this registry holds, as its ``pool_key``: a process that starts many runs
        with it pickles it once while no skill is registered (see ``actors._pickling``)."""
        return self.pool_key

    def __getstate__(self) -> dict[str, Any]:
        self.pool_key  # computed here, so the unpickled copy names the same pools
        return self.__dict__.copy()

    def skill(self, name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn`` under ``name`` (default: its ``__name__``) with ``register``'s
        options; returns ``fn``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(name if name else getattr(fn, "__name__", ""), fn, **options)
            return fn

        return register

    def _policy_of(self, where: str, replicas: int | None, policy: PoolPolicy | None, default: int) -> PoolPolicy:
        if replicas is not None and policy is not None:
            raise PoolConfigError(f"{where}: pass replicas= or policy=, not both")
        if policy is not None:
            if isinstance(policy, dict):
                try:
                    return PoolPolicy.model_validate(policy)
                except ValidationError as exc:
                    raise config_error(f"{where}: policy", exc) from None
            if not isinstance(policy, PoolPolicy):
                raise PoolConfigError(f"{where}: policy must be a PoolPolicy, got {type(policy).__name__}")
            return policy
        if replicas is None:
            replicas = default
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise PoolConfigError(f"{where}: replicas must be an int >= 1, got {replicas!r}")
        return PoolPolicy.up_to(replicas, retire_after_s=self._retire_after_s)

    def register(self, name: str, fn: Callable[..., Any], *, replicas: int | None = None,
                 policy: PoolPolicy | None = None, num_cpus: float | None = None, num_gpus: float | None = None,
                 memory: int | None = None, resources: dict[str, float] | None = None) -> SkillSpec:
        """Register ``fn``; its input and output types come from its annotations. The pool
        options default to the registry's (see the class docstring)."""
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
        where = f"skill {name!r}"
        pool_policy = self._policy if replicas is None and policy is None else \
            self._policy_of(where, replicas, policy, self._policy.max_replicas)
        base = self._resources
        reserved = _resources_of(
            where, base.num_cpus if num_cpus is None else num_cpus, base.num_gpus if num_gpus is None else num_gpus,
            base.memory if memory is None else memory, base.resources if resources is None else resources)
        if ray.is_initialized():  # else the pool checks at its first use
            check_cluster_has(name, reserved)
        if problems:
            raise SkillRegistrationError(f"cannot register skill {name!r}: " + "; ".join(problems))
        unpicklable = explain_unpicklable(fn, f"skill {name!r}")  # it runs in subagent actors, so it travels
        if unpicklable is not None:
            raise NotPicklable(unpicklable)
        spec = SkillSpec(
            name=name,
            fn=fn,
            input_type=input_type,
            output_type=output_type,
            is_async=inspect.iscoroutinefunction(fn),
            policy=pool_policy,
            resources=reserved,
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
        """``(max replicas, num_cpus)`` of the named skill's subagent pool."""
        return self.pool_policy(name).max_replicas, self.replica_resources(name).num_cpus

    def pool_policy(self, name: str) -> PoolPolicy:
        """How the named skill's pool grows and shrinks."""
        spec = self._skills.get(name)
        return self._policy if spec is None else spec.policy

    def replica_resources(self, name: str) -> ReplicaResources:
        """What each replica of the named skill's pool reserves."""
        spec = self._skills.get(name)
        return self._resources if spec is None else spec.resources

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
