"""The runtime works where OpenTelemetry is not installed.

A ``sitecustomize`` on ``PYTHONPATH`` hides the ``opentelemetry`` package (a meta-path
blocker) in a fresh driver and in every Ray worker it starts (workers inherit the
environment), and the driver runs handoffs end to end on its own small Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900)]

# Ray's own helper processes (dashboard agent, log monitor...) may import OpenTelemetry for
# Ray's metrics; they are not soloist, so only the driver and the workers are blinded.
_BLOCKER = textwrap.dedent(
    '''
    import sys

    _argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "/ray/" not in _argv or "default_worker.py" in _argv:

        class _NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
                return None

        sys.meta_path.insert(0, _NoOpenTelemetry())
    '''
)

_DRIVER = textwrap.dedent(
    '''
    import asyncio, json
    import ray
    from pydantic import BaseModel

    try:
        import opentelemetry  # noqa: F401
        hidden = False
    except ImportError:
        hidden = True

    from actors import Call, Orchestrator, SkillRegistry, handoff, parallel_handoff, tracing_available
    from cluster import metrics


    class Empty(BaseModel):
        pass


    class In(BaseModel):
        n: int


    class Out(BaseModel):
        n: int
        otel_in_worker: bool


    skills = SkillRegistry(replicas=1)


    @skills.skill("double")
    def double(inp: In) -> Out:
        try:
            import opentelemetry  # noqa: F401
            present = True
        except ImportError:
            present = False
        return Out(n=inp.n * 2, otel_in_worker=present)


    async def main():
        orch = Orchestrator(Empty(), caller=skills)
        orch.set_tracer(None)
        one = await handoff(orch, Call("double", In(n=2)), Out)
        many = await parallel_handoff(orch, [Call("double", In(n=i)) for i in range(3)], Out)
        await orch.close()
        return one, many


    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024)
    try:
        one, many = asyncio.run(main())
        print(json.dumps({
            "hidden": hidden,
            "tracing_available": tracing_available(),
            "one": one.n,
            "many": [r.output.n for r in many],
            "otel_in_worker": one.otel_in_worker,
            "metrics_flushed": metrics.flush(),
        }))
    finally:
        ray.shutdown()
    '''
)


def test_handoffs_run_and_are_counted_without_opentelemetry_installed(tmp_path: Path):
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER)
    (tmp_path / "driver.py").write_text(_DRIVER)
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(repo), env.get("PYTHONPATH", "")])
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {
        "hidden": True,
        "tracing_available": False,
        "one": 4,
        "many": [0, 2, 4],
        "otel_in_worker": False,
        "metrics_flushed": True,
    }
