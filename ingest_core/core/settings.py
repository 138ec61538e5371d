"""Where things live when nothing is configured: everything under one folder, `INGEST_HOME`.

  INGEST_HOME          default ./.ingest-home (relative to the working directory)
  INGEST_METADATA_URL  SQLAlchemy URL of the metadata store; default sqlite:///$INGEST_HOME/metadata.db
                       (production: postgresql+psycopg2://user@host:5432/db)
  INGEST_DEEP_STORAGE  default deep storage URI for specs that do not set microbatch.deepStorage.uri;
                       default file://$INGEST_HOME/deep-storage
  INGEST_STRICT_SPECS  true: unknown spec fields are errors in DAG parsing and `ingest validate` (default
                       false: warnings, as Druid ignores them)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOME_VAR, METADATA_URL_VAR, DEEP_STORAGE_VAR = "INGEST_HOME", "INGEST_METADATA_URL", "INGEST_DEEP_STORAGE"
STRICT_SPECS_VAR = "INGEST_STRICT_SPECS"


def strict_specs(env: dict[str, str] | None = None) -> bool:
    """Whether unknown spec fields are errors (`INGEST_STRICT_SPECS`: true/1/yes) rather than warnings."""
    value = (os.environ if env is None else env).get(STRICT_SPECS_VAR, "")
    return value.strip().lower() in ("true", "1", "yes", "on")


@dataclass(frozen=True)
class Settings:
    home: Path
    metadata_url: str
    deep_storage: str

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        home = Path(env.get(HOME_VAR, ".ingest-home")).resolve()
        return cls(
            home=home,
            metadata_url=env.get(METADATA_URL_VAR) or f"sqlite:///{home / 'metadata.db'}",
            deep_storage=env.get(DEEP_STORAGE_VAR) or (home / "deep-storage").as_uri(),
        )
