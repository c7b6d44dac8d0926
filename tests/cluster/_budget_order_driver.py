"""A driver on a Ray of its own (no other replica anywhere): the replica budget full, two
requests wait, the later one older; each place freed goes to the oldest. Prints the order."""

from __future__ import annotations

import sys
import threading
import time

import ray

from cluster import acquire_replica_place, replica_budget, set_replica_budget


def main() -> int:
    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
             log_to_driver=False)
    try:
        set_replica_budget(1)
        assert acquire_replica_place("soloist:sub:order:skill:0", since=0.0, wait_s=30.0)
        granted: list[str] = []
        lock = threading.Lock()

        def ask(name: str, since: float) -> None:
            while not acquire_replica_place(f"soloist:sub:order:skill:{name}", since=since, wait_s=30.0):
                pass  # asking again with the same ``since`` keeps its rank
            with lock:
                granted.append(name)

        # The younger request (since=2) asks first; the older (since=1) second.
        younger = threading.Thread(target=ask, args=("young", 2.0))
        younger.start()
        while replica_budget().waiting < 1:
            time.sleep(0.01)
        older = threading.Thread(target=ask, args=("old", 1.0))
        older.start()
        while replica_budget().waiting < 2:
            time.sleep(0.01)
        set_replica_budget(2)  # one place frees: the older request gets it
        older.join(60)
        assert not older.is_alive(), "the older request was never granted"
        assert replica_budget().waiting == 1 and granted == ["old"], granted
        set_replica_budget(3)
        younger.join(60)
        assert not younger.is_alive(), "the younger request was never granted"
        print("ORDER", " ".join(granted), flush=True)
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
