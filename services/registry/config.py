"""Registry settings (POLYMORPH_REGISTRY_*), read once at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.common.config import CommonSettings, Env


@dataclass(frozen=True)
class RegistryConfig:
    db_path: Path            # the DuckDB file this process alone opens
    sql_timeout_s: float     # a registry.sql query running longer is interrupted
    sql_max_rows: int        # rows per reply when the request says 0
    sql_row_limit: int       # hard cap whatever the request asks for
    sql_readers: int         # queries (and exports) that run at once, each on its own cursor
    export_root: Path        # registry.export writes only into directories under this one
    max_deliver: int         # deliveries per message before JetStream gives up (verdicts wait for
                             # their benchmark this long; the registry is the system of record)
    lockdown: bool           # disable DuckDB file access from SQL (read_csv('/etc/...') and friends)
    threads: int
    memory_limit: str
    signing_dir: Path        # the registry's Ed25519 key pair (private key 0600, public key readable)
    candidate_deliveries: int = 8  # a benchmark or verdict whose candidate is still unknown after this
                                   # many deliveries (~2 min at the bus's backoff) is refused

    @property
    def staging_dir(self) -> Path:
        """The one directory DuckDB may write to under lockdown: Parquet exports are staged here,
        inside the export root so that a finished file moves into place with one rename."""
        return self.export_root / ".staging"

    @classmethod
    def from_env(cls, env: Env, common: CommonSettings) -> RegistryConfig:
        return cls(
            db_path=env.path("REGISTRY_DB", common.data_dir / "registry.duckdb").resolve(),
            sql_timeout_s=env.float("REGISTRY_SQL_TIMEOUT_S", 30.0),
            sql_max_rows=env.int("REGISTRY_SQL_MAX_ROWS", 1000),
            sql_row_limit=env.int("REGISTRY_SQL_ROW_LIMIT", 100_000),
            sql_readers=env.int("REGISTRY_SQL_READERS", 4),
            export_root=env.path("REGISTRY_EXPORT_ROOT", common.data_dir / "exports").resolve(),
            max_deliver=env.int("REGISTRY_MAX_DELIVER", 100),
            candidate_deliveries=env.int("REGISTRY_CANDIDATE_DELIVERIES", 8),
            lockdown=env.bool("REGISTRY_LOCKDOWN", True),
            threads=env.int("REGISTRY_THREADS", 2),
            memory_limit=env.str("REGISTRY_MEMORY_LIMIT", "1GB"),
            signing_dir=env.path("REGISTRY_SIGNING_DIR", common.data_dir / "registry").resolve(),
        )
