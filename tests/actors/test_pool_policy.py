"""Pool policies and replica resources are checked where they are declared: bad input is
refused at registration with a message naming the field, and nothing starts.

Pure validation runs without Ray, in milliseconds; one test asks a running cluster for a
resource it does not have.
"""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from actors import PoolConfigError, PoolPolicy, ReplicaResources, SkillRegistry
from cluster import live_replica_names


class In(BaseModel):
    n: int = 0


class Out(BaseModel):
    n: int = 0


def echo(inp: In) -> Out:
    return Out(n=inp.n)


# ---------------------------------------------------------------------------- PoolPolicy


def test_the_default_policy_keeps_one_replica_warm_and_grows_to_eight():
    policy = PoolPolicy()
    assert (policy.min_replicas, policy.max_replicas, policy.target_ongoing_calls) == (1, 8, 8.0)
    assert (policy.upscale_delay_s, policy.downscale_delay_s) == (0.0, 10.0)


def test_a_pool_sized_by_replicas_alone_scales_from_zero_one_call_per_replica():
    policy = PoolPolicy.up_to(3, retire_after_s=2.5)
    assert (policy.min_replicas, policy.max_replicas, policy.target_ongoing_calls, policy.downscale_delay_s) == (0, 3, 1.0, 2.5)


def test_min_replicas_above_max_replicas_is_refused_naming_both():
    # PoolPolicy is a pydantic model: built directly it raises pydantic's ValidationError (a
    # ValueError); passed to a registry as a dict, PoolConfigError (below).
    with pytest.raises(ValueError, match=r"min_replicas \(3\) must not exceed max_replicas \(2\)"):
        PoolPolicy(min_replicas=3, max_replicas=2)


@pytest.mark.parametrize("field, value", [
    ("min_replicas", -1),
    ("max_replicas", 0),
    ("target_ongoing_calls", 0),
    ("target_ongoing_calls", math.nan),
    ("target_ongoing_calls", math.inf),
    ("upscale_delay_s", -0.5),
    ("upscale_delay_s", math.inf),
    ("downscale_delay_s", -1),
    ("downscale_delay_s", math.nan),
])
def test_a_bad_policy_field_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        PoolPolicy(**{field: value})


def test_an_unknown_policy_field_is_refused_naming_it():
    with pytest.raises(ValueError, match="max_replica"):
        PoolPolicy(max_replica=3)  # type: ignore[call-arg]


def test_a_policy_is_frozen():
    with pytest.raises(ValueError):
        PoolPolicy().max_replicas = 2  # type: ignore[misc]


# ---------------------------------------------------------------------------- ReplicaResources


def test_replica_resources_name_rays_resources_and_leave_zeros_out():
    resources = ReplicaResources(num_cpus=0.5, memory=1024, resources={"accelerator": 2})
    assert resources.needs() == {"CPU": 0.5, "memory": 1024.0, "accelerator": 2.0}
    assert ReplicaResources().needs() == {}
    assert [resources.field_of(name) for name in ("CPU", "GPU", "memory", "accelerator")] == [
        "num_cpus", "num_gpus", "memory", "resources['accelerator']"]


@pytest.mark.parametrize("field, value", [("num_cpus", -1), ("num_gpus", -0.5), ("memory", -1)])
def test_a_negative_amount_is_refused_naming_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        ReplicaResources(**{field: value})


@pytest.mark.parametrize("name", ["CPU", "GPU", "memory"])
def test_a_built_in_resource_among_custom_resources_is_refused_naming_it(name):
    with pytest.raises(ValueError, match=rf"resources\['{name}'\]: use num_cpus, num_gpus or memory"):
        ReplicaResources(resources={name: 1})


@pytest.mark.parametrize("amount", [0, -1, math.nan, math.inf])
def test_a_custom_resource_amount_that_is_not_positive_and_finite_is_refused_naming_it(amount):
    with pytest.raises(ValueError, match=r"resources\['accelerator'\] must be a positive number"):
        ReplicaResources(resources={"accelerator": amount})


# ---------------------------------------------------------------------------- SkillRegistry


@pytest.mark.parametrize("options, named", [
    ({"policy": {"min_replicas": 3, "max_replicas": 2}}, r"min_replicas \(3\) must not exceed max_replicas \(2\)"),
    ({"policy": {"downscale_delay_s": -1}}, "downscale_delay_s"),
    ({"policy": {"upscale_delay_s": -1}}, "upscale_delay_s"),
    ({"policy": {"target_ongoing_calls": 0}}, "target_ongoing_calls"),
    ({"policy": {"max_replica": 3}}, "max_replica"),
    ({"policy": 3}, "policy must be a PoolPolicy, got int"),
    ({"replicas": 0}, "replicas must be an int >= 1, got 0"),
    ({"replicas": True}, "replicas must be an int >= 1, got True"),
    ({"replicas": 2, "policy": PoolPolicy()}, "pass replicas= or policy=, not both"),
    ({"num_cpus": -1}, "num_cpus"),
    ({"num_gpus": -1}, "num_gpus"),
    ({"memory": -1}, "memory"),
    ({"resources": {"accelerator": 0}}, r"resources\['accelerator'\] must be a positive number"),
    ({"resources": {"GPU": 1}}, r"resources\['GPU'\]: use num_cpus, num_gpus or memory"),
    ({"retire_after_s": -1}, "retire_after_s must be a finite number >= 0, got -1"),
    ({"retire_after_s": math.inf}, "retire_after_s must be a finite number >= 0"),
])
def test_a_registry_with_bad_pool_options_is_refused_naming_the_field(options, named):
    with pytest.raises(PoolConfigError, match=named):
        SkillRegistry(**options)


@pytest.mark.parametrize("options, named", [
    ({"policy": {"min_replicas": 5, "max_replicas": 4}}, r"min_replicas \(5\) must not exceed max_replicas \(4\)"),
    ({"policy": {"downscale_delay_s": -2}}, "downscale_delay_s"),
    ({"policy": "fast"}, "policy must be a PoolPolicy, got str"),
    ({"replicas": -3}, "replicas must be an int >= 1, got -3"),
    ({"replicas": 2, "policy": PoolPolicy()}, "pass replicas= or policy=, not both"),
    ({"num_cpus": -0.5}, "num_cpus"),
    ({"resources": {"accelerator": -1}}, r"resources\['accelerator'\] must be a positive number"),
])
def test_a_skill_with_bad_pool_options_is_refused_at_registration_naming_the_skill_and_the_field(options, named):
    registry = SkillRegistry()
    with pytest.raises(PoolConfigError, match=named) as refused:
        registry.register("echo", echo, **options)
    assert "skill 'echo'" in str(refused.value)
    assert "echo" not in registry and len(registry) == 0, "a refused skill was registered"


def test_every_bad_policy_field_is_named_at_once():
    with pytest.raises(PoolConfigError) as refused:
        SkillRegistry(policy={"upscale_delay_s": -1, "downscale_delay_s": -2, "target_ongoing_calls": 0})  # type: ignore[arg-type]
    for field in ("upscale_delay_s", "downscale_delay_s", "target_ongoing_calls"):
        assert field in str(refused.value)


def test_pool_config_errors_are_value_errors():
    assert issubclass(PoolConfigError, ValueError)


def test_a_skill_takes_the_registrys_options_unless_it_declares_its_own():
    # Resources every cluster has: with Ray up (earlier tests), registration asks it.
    registry = SkillRegistry(policy=PoolPolicy(min_replicas=0, max_replicas=3), num_cpus=0.5, memory=1024)
    inherited = registry.register("echo", echo)
    own = registry.register("echo-too", echo, policy=PoolPolicy(min_replicas=2, max_replicas=6), num_cpus=0.25)
    assert inherited.policy == PoolPolicy(min_replicas=0, max_replicas=3)
    assert inherited.resources == ReplicaResources(num_cpus=0.5, memory=1024)
    assert own.policy == PoolPolicy(min_replicas=2, max_replicas=6)
    assert own.resources == ReplicaResources(num_cpus=0.25, memory=1024)
    assert registry.pool_policy("echo-too") == own.policy and registry.replica_resources("echo") == inherited.resources


# ---------------------------------------------------------------------------- against a running cluster


@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("options, named", [
    ({"resources": {"soloist-test-no-such-resource": 1}}, "resources['soloist-test-no-such-resource']=1"),
    ({"num_gpus": 1}, "num_gpus=1"),
    ({"num_cpus": 4096}, "num_cpus=4096"),
])
def test_a_resource_the_cluster_does_not_have_is_refused_at_registration_and_nothing_starts(options, named):
    skill = f"missing-{next(iter(options))}"
    before = live_replica_names()
    registry = SkillRegistry()
    with pytest.raises(PoolConfigError) as refused:
        registry.register(skill, echo, **options)
    message = str(refused.value)
    assert f"skill {skill!r}" in message and named in message, message
    assert skill not in registry, "a refused skill was registered"
    started = {name for name in live_replica_names() - before if f":{skill}:" in name}
    assert not started, f"a refused skill started replicas: {sorted(started)}"
