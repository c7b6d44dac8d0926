"""The registry the built-in exploration hands off to: ``exploration_registry``, one warm pool.

A ``soloist run`` hands off a few small calls of five skills in three or four rounds, a turn
apart. Sized as a plain ``SkillRegistry`` (a pool per skill, scaled from zero, retired five
seconds after its last call) every round of a run started a process per skill it used and
waited for it: about a second of a core each, most of a run's time on a small machine.
Here the five skills share one pool (``SharedPools``): a replica runs any of them, each in
its own thread, up to 64 calls at once, so the cap's four calls of a round fit in one warm
replica. The pool keeps one replica up (``min_replicas=1``) while runs use it and for
``SOLOIST_REPLICA_KEEP_S`` after (``actors.handoffs.pools``), so the runs that follow on the
same cluster find it started, and grows under load like any pool (``PoolPolicy``).
"""

from __future__ import annotations

import hashlib

import cloudpickle

from actors.builtin.code_skills import CODE_SKILLS
from actors.callers.policy import PoolPolicy
from actors.callers.skills import SkillRegistry

__all__ = ["CODE_POOL", "CodeSkillRegistry", "exploration_registry"]

#: The pool every skill of a ``CodeSkillRegistry`` is served by.
CODE_POOL = "code"


class CodeSkillRegistry(SkillRegistry):
    """A ``SkillRegistry`` whose skills share one subagent pool (``pool_group``): one process
    serves every skill of the registry, instead of one (or more) per skill."""

    def pool_group(self, name: str) -> str:
        """``CODE_POOL`` for a skill of this registry; a name it does not serve keeps its own."""
        return CODE_POOL if name in self else name

    @property
    def pool_key(self) -> str:
        """A digest of the skills (names, functions, types) and the pool options that is the
        same in every process: the options are digested as their JSON values. (A pickled
        ``PoolPolicy`` carries the set of its fields set, whose order follows the process's
        string hashing, so two drivers would name two pools, and each would keep a replica.)"""
        if self._pool_key is None:
            specs = [spec for spec in map(self.spec, self.names()) if spec is not None]  # sorted by name
            served = [(spec.name, spec.fn, spec.input_type, spec.output_type, spec.policy.model_dump(mode="json"),
                       spec.resources.model_dump(mode="json")) for spec in specs]
            options = (self.pool_policy("").model_dump(mode="json"), self.replica_resources("").model_dump(mode="json"),
                       self.retire_after_s, CODE_POOL)
            self._pool_key = f"skills-{hashlib.sha1(cloudpickle.dumps((served, options))).hexdigest()[:16]}"
        return self._pool_key


def exploration_registry(*, replicas: int = 4) -> CodeSkillRegistry:
    """The code skills (``CODE_SKILLS``) in a ``CodeSkillRegistry`` whose pool keeps one replica
    up while it is used and grows to ``replicas`` under load (eight calls in flight per replica)."""
    registry = CodeSkillRegistry(policy=PoolPolicy(min_replicas=1, max_replicas=replicas))
    for name, fn in CODE_SKILLS.items():
        registry.register(name, fn)
    return registry
