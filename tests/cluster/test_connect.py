"""cluster.connect: embedded by default, idempotent, clear errors for bad addresses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster import ClusterInfo, connect


@pytest.mark.parametrize("address, error, text", [("", ValueError, "empty string"), (6379, TypeError, "takes a string")])
def test_bad_addresses_are_rejected_before_touching_ray(address, error, text):
    with pytest.raises(error, match=text):
        connect(address)  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_session")
def test_connect_when_already_connected_describes_the_connection_and_changes_nothing():
    import ray

    before = ray.get_runtime_context().gcs_address
    info = connect()
    assert isinstance(info, ClusterInfo)
    assert info.address == before and info.nodes >= 1 and info.cpus == 4


def test_connect_starts_an_embedded_ray_without_a_dashboard_in_a_fresh_process():
    code = (
        "from cluster import connect; import ray\n"
        "info = connect()\n"
        "print(info.embedded, info.nodes, ray.get_runtime_context().get_node_id() != '')\n"
        "ray.shutdown()\n"
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "True 1 True"
