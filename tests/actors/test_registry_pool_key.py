"""Equal skill registries name the same pools in every process (no Ray): the pool key does not
depend on a process's string hashing, so two drivers share their replicas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_PRINT_KEY = """
from actors import PoolPolicy, ReplicaResources, SkillRegistry
from tests.actors.run_fixtures import EchoIn, EchoOut


def echo(inp: EchoIn) -> EchoOut:
    return EchoOut(echoed=inp.text)


registry = SkillRegistry(policy=PoolPolicy(min_replicas=1, max_replicas=3, downscale_delay_s=2.0), num_cpus=0.5)
registry.register("echo", echo, policy=PoolPolicy(min_replicas=0, max_replicas=2))
print(registry.pool_key)
"""


def test_equal_registries_name_the_same_pools_whatever_the_process_hash_seed() -> None:
    keys = set()
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", _PRINT_KEY], capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        keys.add(result.stdout.strip())
    assert len(keys) == 1, keys
