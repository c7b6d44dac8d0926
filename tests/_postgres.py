"""The throw-away PostgreSQL servers of the tests: ``cluster.storage.pg_server`` (public, so
the benchmarks start theirs with the same code)."""

from cluster.storage.pg_server import (
    ENV_URL,
    USER_WITH_PASSWORD,
    PostgresServer,
    postgres_bin_dir,
    schema_url,
    shared_server,
)

__all__ = ["ENV_URL", "USER_WITH_PASSWORD", "PostgresServer", "postgres_bin_dir", "schema_url", "shared_server"]
