"""The soak's names and its log line: one datasource and topic, its DAG runs' logical dates."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

AIRFLOW = str(Path(sys.executable).parent / "airflow")
DATASOURCE = TOPIC = "soak"
BASE_LOGICAL_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)
MILESTONES = ("started", "planned", "spark", "reading", "publish", "published")
MAX_PARTITIONS = 32  # a full soak draws partition_growth 10+ times


def log(msg: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)
