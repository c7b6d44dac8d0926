"""Records an actor keeps outside its own memory, in the cluster's key-value store (its GCS).

What an actor must find again after Ray restarts it (its memory went with the old process;
the GCS did not): one key per record under the actor's name, in a namespace of the
component's own. The writer puts a record when it takes something up and deletes it when it
lets go, so the records are bounded by what live actors hold, never by what they ever held.

Blocking calls (one round trip to the GCS each): an actor's event loop runs them on a thread.
"""

from __future__ import annotations

from ray.experimental.internal_kv import (  # the GCS key-value store, as cluster.connect uses it
    _internal_kv_del,
    _internal_kv_list,
    _internal_kv_put,
    internal_kv_get_gcs_client,
)

__all__ = ["ClusterRecords"]

_READ_AT_ONCE = 1_000  # keys read back per round trip


class ClusterRecords:
    """The records of one owner (an actor's name) in one namespace: record key -> bytes."""

    def __init__(self, namespace: str, owner: str) -> None:
        if not namespace or not owner:
            raise ValueError(f"ClusterRecords needs a namespace and an owner, got {namespace!r} and {owner!r}")
        self._namespace = namespace
        self._prefix = f"{owner}/".encode()

    def put(self, key: str, value: bytes) -> None:
        _internal_kv_put(self._prefix + key.encode(), value, overwrite=True, namespace=self._namespace)

    def delete(self, key: str) -> None:
        _internal_kv_del(self._prefix + key.encode(), namespace=self._namespace)

    def load(self) -> dict[str, bytes]:
        """Every record of the owner, read back a thousand keys per round trip."""
        keys = _internal_kv_list(self._prefix, namespace=self._namespace)
        client = internal_kv_get_gcs_client()
        records: dict[str, bytes] = {}
        for start in range(0, len(keys), _READ_AT_ONCE):
            found = client.internal_kv_multi_get(keys[start:start + _READ_AT_ONCE], namespace=self._namespace.encode())
            records.update((key[len(self._prefix):].decode(), value) for key, value in found.items())
        return records

    def clear(self) -> None:
        """Delete every record of the owner."""
        _internal_kv_del(self._prefix, del_by_prefix=True, namespace=self._namespace)
