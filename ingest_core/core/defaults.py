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
# A group of at most this many offsets is read by one Spark task, its splits one after the other: its rollup then
# needs no shuffle, one stage instead of two (about 0.1 s less per job), and a task reads this many in about as long.
ONE_TASK_MAX_RECORDS = 20_000

# compaction (Druid's auto-compaction defaults): leave the latest day alone, segments of up to 5M rows
COMPACTION_SKIP_OFFSET = "P1D"
COMPACTION_MAX_ROWS_PER_SEGMENT = 5_000_000
COMPACTION_SCHEDULE = "PT1H"
# kill: how long after compaction made a segment unused its file and record are deleted
KILL_BUFFER_PERIOD = "P1D"

# Deadlines of the calls to remote dependencies (docs/deadlines.md): how long each may go unanswered before it
# fails with its dependency's error (core.errors.DependencyUnavailableError), which `ingest status` names.
# Kafka: each blocking call of the planner, the publish's consumer-group mirror, the dead-letter producer and
# `status` (a spec's consumerProperties `default.api.timeout.ms`, the Java client's setting, overrides it).
KAFKA_CALL_TIMEOUT_S = 15.0
# A schema registry: each HTTP request (`SCHEMA_REGISTRY_TIMEOUT_S`), asked again after these waits (a GET is
# safe to repeat), all within `SCHEMA_REGISTRY_DEADLINE_S` per lookup.
SCHEMA_REGISTRY_TIMEOUT_S = 10.0
SCHEMA_REGISTRY_RETRY_DELAYS_S = (0.5, 1.0, 2.0)
SCHEMA_REGISTRY_DEADLINE_S = 30.0
# The metadata store (PostgreSQL): a connection not established in this long fails (libpq's connect_timeout;
# a URL's own `?connect_timeout=` wins); connecting again is retried for INGEST_METADATA_RETRY_SECONDS.
METADATA_CONNECT_TIMEOUT_S = 10
# An object store (S3 deep storage): the TCP connect and each request (pyarrow's S3FileSystem connect_timeout
# and request_timeout; the AWS SDK retries a request 3 times in all).
OBJECT_STORE_CONNECT_TIMEOUT_S = 10.0
OBJECT_STORE_REQUEST_TIMEOUT_S = 60.0  # a multipart upload's part on a slow link takes a while
# Spark Connect: the server must accept the session's channel (gRPC's HTTP/2 handshake) within this long.
SPARK_CONNECT_TIMEOUT_S = 30.0
