"""How a skill's pool of subagent replicas is sized (``PoolPolicy``) and what each replica
reserves on a node (``ReplicaResources``).

Both are checked when they are built, so bad input is refused at registration, naming the
field, before anything starts. The pool that applies them is ``actors.handoffs.pools``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from actors.exceptions import PoolConfigError
from cluster.replicas import missing_resources

__all__ = ["PoolPolicy", "ReplicaResources", "check_cluster_has", "config_error"]


class PoolPolicy(BaseModel):
    """When a skill's pool grows and shrinks.

    The pool keeps between ``min_replicas`` and ``max_replicas`` replicas. It wants
    ``ceil(ongoing / target_ongoing_calls)`` of them, where ``ongoing`` counts the calls this
    process has sent to the pool and not yet had answered (waiting in a lane, waiting for a
    permit, or running). It grows once that want has stood for ``upscale_delay_s``; a
    replica that has had nothing to run or wait for ``downscale_delay_s`` ends itself (the
    first ``min_replicas`` slots never do). ``min_replicas=0`` scales to zero: the next call
    starts a replica and waits for it.

    The defaults suit a burst of a few seconds: grow at once, shrink ten seconds after the
    burst, one replica kept warm. A replica runs many async bodies at once (up to 64 calls),
    so eight ongoing calls per replica keeps processes few on a small machine.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(8, ge=1)
    target_ongoing_calls: float = Field(8.0, gt=0)
    upscale_delay_s: float = Field(0.0, ge=0)
    downscale_delay_s: float = Field(10.0, ge=0)

    @field_validator("target_ongoing_calls", "upscale_delay_s", "downscale_delay_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _min_at_most_max(self) -> "PoolPolicy":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must not exceed max_replicas ({self.max_replicas})")
        return self

    @classmethod
    def up_to(cls, replicas: int, *, retire_after_s: float) -> "PoolPolicy":
        """The policy of a pool sized by ``replicas=`` alone: up to that many, one call per
        replica, none kept when idle for ``retire_after_s``."""
        return cls(min_replicas=0, max_replicas=replicas, target_ongoing_calls=1.0, downscale_delay_s=retire_after_s)


class ReplicaResources(BaseModel):
    """What one replica of a skill reserves on its node: Ray's ``num_cpus``, ``num_gpus``,
    ``memory`` (bytes) and custom ``resources``. A replica goes only to a node that has them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_cpus: float = Field(0.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    memory: int = Field(0, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)

    @field_validator("resources")
    @classmethod
    def _positive_amounts(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if not name or name in ("CPU", "GPU", "memory"):
                raise ValueError(f"resources[{name!r}]: use num_cpus, num_gpus or memory for Ray's built-in resources")
            if not math.isfinite(amount) or amount <= 0:
                raise ValueError(f"resources[{name!r}] must be a positive number, got {amount!r}")
        return value

    def needs(self) -> dict[str, float]:
        """Ray's resource names and the amount of each this replica reserves (zeros left out)."""
        out: dict[str, Any] = {"CPU": self.num_cpus, "GPU": self.num_gpus, "memory": float(self.memory), **self.resources}
        return {name: float(amount) for name, amount in out.items() if amount > 0}

    def field_of(self, resource: str) -> str:
        """The field that declares Ray resource ``resource`` (for messages)."""
        return {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}.get(resource, f"resources[{resource!r}]")


def config_error(where: str, exc: ValidationError) -> PoolConfigError:
    """A ``PoolConfigError`` that names each field pydantic refused, for ``where`` (a skill)."""
    def message(error: Any) -> str:
        text = str(error["msg"]).removeprefix("Value error, ")
        field = ".".join(str(part) for part in error["loc"])
        return f"{field}: {text}" if field else text

    problems = "; ".join(message(error) for error in exc.errors())
    return PoolConfigError(f"{where}: {problems}")


def check_cluster_has(skill: str, resources: ReplicaResources) -> None:
    """Raise ``PoolConfigError`` naming the field when no alive node has enough of a resource
    that ``resources`` asks for (Ray must be up)."""
    needs = resources.needs()
    missing = missing_resources(needs)
    if missing:
        fields = ", ".join(f"{resources.field_of(name)}={needs[name]:g}" for name in missing)
        raise PoolConfigError(
            f"skill {skill!r}: no node of the cluster has {fields} for one replica; declare less, "
            "or add a node that has it (ray start --address ... --resources ...)")
