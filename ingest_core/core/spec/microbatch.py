"""`microbatch`: this system's own section (schedule, data gate, health, Spark, deep storage, dead letters, Iceberg)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ingest_core.core import defaults
from ingest_core.core import secrets as credentials
from ingest_core.core.binding import BindContext, check_period, check_range, did_you_mean, join, spec_field
from ingest_core.core.cron import CONTINUOUS, cron_problem
from ingest_core.core.periods import Period
from ingest_core.core.planner import ASSIGNMENTS, MODULO


# `microbatch.readUpTo`: where a scheduled run's end offsets are taken
INTERVAL_END = "intervalEnd"  # the offsets at its data interval's end (the default for a period or cron schedule)
LATEST = "latest"  # the latest offsets when it plans (always so for "@continuous")
CONTINUOUS_WITHOUT_GATE = (
    f"{CONTINUOUS!r} without a dataGate runs back to back even when the topic is idle: about 16,000 empty runs a "
    "day, each ~5 task processes and ~0.6 MB of logs; add `dataGate: {minRecords: 1, maxWait: PT1M}` so an idle "
    "topic waits in Airflow's triggerer and a maxWait with nothing new ends the run skipped")
READ_UP_TO = (INTERVAL_END, LATEST)


@dataclass(frozen=True)
class DataGate:
    """Seed 002's DelayedFetch: wait until `minRecords` new records exist or `maxWait` passes."""

    min_records: int
    max_wait: Period = spec_field(default_factory=lambda: Period.parse("PT10M"))
    poke_interval: Period = spec_field(default_factory=lambda: Period.parse("PT10S"))

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "minRecords"), self.min_records, minimum=1)
        check_period(ctx, join(path, "maxWait"), self.max_wait, allow_zero=True)
        check_period(ctx, join(path, "pokeInterval"), self.poke_interval)


@dataclass(frozen=True)
class HealthConfig:
    """Druid's supervisor health thresholds (cluster properties there, per datasource here)."""

    unhealthiness_threshold: int = 3  # failed loops (plan steps) in a row -> UNHEALTHY_SUPERVISOR
    healthiness_threshold: int = 3  # successful loops in a row to be healthy again
    task_unhealthiness_threshold: int = 3  # failed runs in a row -> UNHEALTHY_TASKS
    task_healthiness_threshold: int = 3

    def _validate(self, path: str, ctx: BindContext) -> None:
        for name in ("unhealthinessThreshold", "healthinessThreshold", "taskUnhealthinessThreshold",
                     "taskHealthinessThreshold"):
            attr = "".join("_" + c.lower() if c.isupper() else c for c in name)
            check_range(ctx, join(path, name), getattr(self, attr), minimum=1, maximum=1000)


@dataclass(frozen=True)
class SparkConfig:
    conn_id: str = "spark_default"
    master: str | None = None  # overrides the connection's host
    deploy_mode: str | None = None
    conf: dict[str, str] = spec_field(default_factory=dict)
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    num_executors: int | None = None

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "executorCores"), self.executor_cores, minimum=1, maximum=1024)
        check_range(ctx, join(path, "numExecutors"), self.num_executors, minimum=1, maximum=10_000)


@dataclass(frozen=True)
class S3Config:
    """How to reach an S3 or S3-compatible deep storage (`deepStorage.s3`); left out, the AWS SDKs' own chain
    (AWS_* environment variables, ~/.aws, an instance role) and AWS's endpoints apply. Credentials are only ever
    references, never values: an Airflow connection (`connection`: login = access key id, password = secret
    access key, extra `endpoint_url` / `region_name`, as Airflow's `aws` connection type has them) or secret
    references (`{type: environment, variable: NAME}`, `{type: airflowConnection, connId: ID, field: F}`)."""

    endpoint: str | None = None  # http(s)://host:port of an S3-compatible store; none: AWS S3
    region: str | None = None
    path_style_access: bool | None = None  # bucket in the path, not the host name; default: true with an endpoint
    connection: str | None = None  # an Airflow connection id
    # secret references; typed Any so that a key written as a value is refused by `_validate` without echoing it
    access_key_id: Any = None
    secret_access_key: Any = None
    session_token: Any = None  # temporary credentials

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.endpoint is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.endpoint):
            ctx.error(join(path, "endpoint"), f"expected http(s)://host:port, got {self.endpoint!r}")
        for name, ref in self.references().items():
            problem = (credentials.parse_secret_ref(ref)[1] if isinstance(ref, dict)
                       else "a value was given")  # never echoed: it may be the key itself
            if problem is not None:
                ctx.error(join(path, name), "expected a secret reference, {type: environment, variable: NAME} or "
                          "{type: airflowConnection, connId: ID, field: password}: a key is never written into "
                          f"a spec ({problem})")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            ctx.error(path, "accessKeyId and secretAccessKey go together: set both, or neither")
        if self.connection is not None and self.access_key_id is not None:
            ctx.error(path, "credentials from either `connection` or accessKeyId/secretAccessKey, not both")

    def references(self) -> dict[str, Any]:
        """The secret references set, by their JSON key."""
        refs = {"accessKeyId": self.access_key_id, "secretAccessKey": self.secret_access_key,
                "sessionToken": self.session_token}
        return {k: v for k, v in refs.items() if v is not None}


@dataclass(frozen=True)
class DeepStorage:
    # A Hadoop-compatible URI (file://, hdfs://, s3a://, ...); default: $INGEST_HOME/deep-storage.
    uri: str | None = None
    s3: S3Config | None = None  # for an s3a:// (or s3://) uri: endpoint, region, credentials

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.s3 is not None and self.uri is not None and not self.uri.startswith(("s3a://", "s3://")):
            ctx.error(join(path, "s3"), f"only for an s3a:// uri, and uri is {self.uri!r}")


# librdkafka settings the dead-letter producer owns: its exactly-once delivery depends on them
DEAD_LETTER_RESERVED = ("transactional.id", "enable.idempotence", "acks", "transaction.timeout.ms")


@dataclass(frozen=True)
class DeadLetter:
    """Dead letters: every record that failed (and with `includeThrownAway`, every one the filter, the rejection
    window or a tombstone dropped) is kept, raw, as Parquet with the run, visible once it publishes; with a
    `topic`, each published run's dead letters are also produced there exactly once."""

    enabled: bool = True
    include_thrown_away: bool = False
    topic: str | None = None
    # over the consumerProperties' connection settings (bootstrap.servers, security), for the dead-letter topic
    producer_properties: dict[str, Any] = spec_field(default_factory=dict)

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.topic is not None and not self.topic.strip():
            ctx.error(join(path, "topic"), "must not be empty (leave it out to keep dead letters in deep storage only)")
        props = join(path, "producerProperties")
        for key, value in self.producer_properties.items():
            if key in DEAD_LETTER_RESERVED:
                ctx.error(join(props, key), "set by the dead-letter producer for exactly-once delivery: remove it")
            elif credentials.is_secret_key(key):
                ctx.error(join(props, key), "secrets are not accepted here: the producer uses ioConfig."
                          "consumerProperties' connection and credentials (secret references included)")
            elif not isinstance(value, (str, int, float, bool)):
                ctx.error(join(props, key), "expected a string, number or boolean")
        if self.producer_properties and self.topic is None:
            ctx.error(props, "only used with a topic: set topic, or remove producerProperties")


@dataclass(frozen=True)
class IcebergTable:
    """An Iceberg table of the datasource's visible segments (`store.iceberg`), in pyiceberg's SQL catalog kept
    in the metadata database: `namespace.table` (default `ingest.<dataSource>`)."""

    enabled: bool = True
    namespace: str = "ingest"
    table: str | None = None  # default: the dataSource

    def _validate(self, path: str, ctx: BindContext) -> None:
        for key, value in (("namespace", self.namespace), ("table", self.table)):
            if value is not None and (not value.strip() or "." in value):
                ctx.error(join(path, key), "must be a non-empty name without '.'")


@dataclass(frozen=True)
class Microbatch:
    """This system's own section: scheduling, planning, Spark and deep storage."""

    schedule: str | None = None  # ISO period, cron or "@continuous"; default ioConfig.taskDuration
    start_date: datetime | None = None
    catchup: bool = False
    max_active_runs: int = 1
    read_up_to: str | None = None  # INTERVAL_END or LATEST; None: LATEST for "@continuous", else INTERVAL_END
    retries: int = 2
    retry_delay: Period = spec_field(default_factory=lambda: Period.parse("PT1M"))
    assignment: str = MODULO
    max_records_per_split: int = defaults.MAX_RECORDS_PER_SPLIT
    min_splits_per_group: int = defaults.MIN_SPLITS_PER_GROUP
    max_records_per_run: int | None = None
    data_gate: DataGate | None = None
    health: HealthConfig = spec_field(default_factory=HealthConfig)
    spark: SparkConfig = spec_field(default_factory=SparkConfig)
    deep_storage: DeepStorage = spec_field(default_factory=DeepStorage)
    # the committed offsets, copied to this Kafka consumer group after each publish (lag in Kafka's tooling)
    mirror_offsets: bool = True
    consumer_group: str | None = None  # default: ingest.<dataSource>
    dead_letter: DeadLetter | None = None
    iceberg: IcebergTable | None = None

    @property
    def iceberg_on(self) -> bool:
        return self.iceberg is not None and self.iceberg.enabled

    @property
    def dead_letters_on(self) -> bool:
        return self.dead_letter is not None and self.dead_letter.enabled

    @property
    def dead_letter_topic(self) -> str | None:
        """The topic dead letters are produced to, when they are kept and one is named."""
        return self.dead_letter.topic if self.dead_letters_on and self.dead_letter else None

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.consumer_group is not None and not self.consumer_group.strip():
            ctx.error(join(path, "consumerGroup"), "must not be empty (set mirrorOffsets: false to mirror nothing)")
        if self.read_up_to is not None and self.read_up_to not in READ_UP_TO:
            ctx.error(join(path, "readUpTo"), f"must be one of {', '.join(READ_UP_TO)}"
                      + did_you_mean(self.read_up_to, READ_UP_TO))
        elif self.read_up_to == INTERVAL_END and self.continuous:
            ctx.error(join(path, "readUpTo"), f"a {CONTINUOUS!r} run has no data interval of its own: it reads up "
                                              f"to the latest offsets (remove readUpTo, or set it to {LATEST!r})")
        if self.assignment not in ASSIGNMENTS:
            ctx.error(join(path, "assignment"), f"must be one of {', '.join(ASSIGNMENTS)}"
                      + did_you_mean(self.assignment, ASSIGNMENTS))
        check_range(ctx, join(path, "maxActiveRuns"), self.max_active_runs, minimum=1, maximum=100)
        check_range(ctx, join(path, "retries"), self.retries, minimum=0, maximum=100)
        check_range(ctx, join(path, "maxRecordsPerSplit"), self.max_records_per_split, minimum=1)
        check_range(ctx, join(path, "minSplitsPerGroup"), self.min_splits_per_group, minimum=1, maximum=10_000)
        check_range(ctx, join(path, "maxRecordsPerRun"), self.max_records_per_run, minimum=1)
        check_period(ctx, join(path, "retryDelay"), self.retry_delay, allow_zero=True)
        if self.schedule is not None and self.schedule.upper().startswith(("P", "-P")):
            try:
                check_period(ctx, join(path, "schedule"), Period.parse(self.schedule), allow_calendar=True)
            except ValueError as exc:
                ctx.error(join(path, "schedule"), str(exc))
        elif self.continuous:
            if self.max_active_runs != 1:
                # Airflow's ContinuousTimetable holds a DAG to one active run (active_runs_limit = 1)
                ctx.error(join(path, "maxActiveRuns"),
                          f"must be 1 with schedule {CONTINUOUS!r}: Airflow runs a continuous DAG one run at a "
                          "time (for runs that overlap, use a short period such as 'PT5S' with maxActiveRuns 2)")
            if self.data_gate is None:
                # a warning, not an error: a spec that loaded before still loads (Druid has no such field)
                ctx.warn(join(path, "schedule"), CONTINUOUS_WITHOUT_GATE)
        elif self.schedule is not None:
            problem = cron_problem(self.schedule)
            if problem:
                ctx.error(join(path, "schedule"), f"{problem}; or {CONTINUOUS!r} for runs back to back")

    @property
    def continuous(self) -> bool:
        """Runs back to back: the next starts as soon as the previous one ends."""
        return self.schedule is not None and self.schedule.strip().lower() == CONTINUOUS

    def reads_to_latest(self, run_type: str) -> bool:
        """Whether a run of Airflow's `run_type` plans up to the latest offsets instead of those at its data
        interval's end: any run of a continuous DAG (its interval ends when Airflow created it, so what arrived
        while it was scheduled would wait for the next run), and a scheduled one with `readUpTo: latest` (a run
        of a short period that starts late reads what is there by then). A backfill reads its interval's slice."""
        return self.continuous or (self.read_up_to == LATEST and run_type == "scheduled")
