"""Defaults that more than one module needs, each stated once (a spec's own defaults are its fields')."""

from __future__ import annotations

# Kafka consumers (the offset reader, the data gate's trigger, the Spark job's splits) read committed records
# only, unless the spec's consumerProperties say read_uncommitted: Druid's default.
ISOLATION_LEVEL = "read_committed"
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
# librdkafka wants a group.id even from a consumer that never joins its group: offsets live in the metadata
# store, nothing is committed to Kafka (`microbatch.consumerGroup` is the mirror for Kafka's tooling).
CONSUMER_GROUP_ID = "kafka-microbatch-ingest"

# The Spark job's splits: a split that reads nothing for this long fails (an unreachable broker), and each
# split reports how far it got this often (status, the UI).
STALL_TIMEOUT_S = 60.0
PROGRESS_INTERVAL_S = 2.0

# How a run's task groups are cut into splits (`microbatch.maxRecordsPerSplit`, `minSplitsPerGroup`).
MAX_RECORDS_PER_SPLIT = 1_000_000
MIN_SPLITS_PER_GROUP = 1

# compaction (Druid's auto-compaction defaults): leave the latest day alone, segments of up to 5M rows
COMPACTION_SKIP_OFFSET = "P1D"
COMPACTION_MAX_ROWS_PER_SEGMENT = 5_000_000
COMPACTION_SCHEDULE = "PT1H"
# kill: how long after compaction made a segment unused its file and record are deleted
KILL_BUFFER_PERIOD = "P1D"
