"""The exploration's registry: every code skill in one pool, named alike by every process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from actors import PoolPolicy, SkillRegistry
from actors.builtin import CODE_POOL, CODE_SKILLS, CodeSkillRegistry, exploration_registry

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_code_skill_is_served_by_one_pool_that_keeps_a_replica_up() -> None:
    registry = exploration_registry(replicas=3)
    assert isinstance(registry, SkillRegistry) and registry.names() == sorted(CODE_SKILLS)
    assert {registry.pool_group(name) for name in CODE_SKILLS} == {CODE_POOL}
    assert registry.pool_group("not_a_code_skill") == "not_a_code_skill"
    assert {registry.pool_policy(name) for name in CODE_SKILLS} == {PoolPolicy(min_replicas=1, max_replicas=3)}


def _key_in_a_process(seed: str) -> str:
    code = "from actors.builtin import exploration_registry; print(exploration_registry().pool_key)"
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_every_process_names_the_same_pool_whatever_its_string_hashing() -> None:
    # Its pool keeps a replica up: two drivers naming two pools would each keep one.
    keys = {_key_in_a_process(seed) for seed in ("1", "2", "3")}
    assert keys == {exploration_registry().pool_key}


def test_the_key_follows_what_the_registry_serves() -> None:
    registry = exploration_registry()
    before = registry.pool_key
    assert exploration_registry(replicas=2).pool_key != before
    registry.register("echo_tree", CODE_SKILLS["list_tree"])
    assert registry.pool_key != before
    assert CodeSkillRegistry().pool_key != before
