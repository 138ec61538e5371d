"""`ioConfig`: the topic, the consumer properties, the task counts and Druid's supervisor timings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from ingest_core.core import defaults
from ingest_core.core.binding import BindContext, check_period, check_range, join, spec_field
from ingest_core.core.errors import shown
from ingest_core.core.periods import Period
from ingest_core.core.spec.input_format import InputFormat


@dataclass(frozen=True)
class IdleConfig:
    """Druid's idle supervisor: with `enabled`, a datasource whose stream has had nothing new for longer than
    `inactiveAfterMillis` reads IDLE (`states.after_nothing_to_read`); a run that finds records makes it RUNNING."""

    enabled: bool = False
    inactive_after_millis: int = 600_000  # Druid's druid.supervisor.idleConfig.inactiveAfterMillis default

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "inactiveAfterMillis"), self.inactive_after_millis, minimum=1)


@dataclass(frozen=True)
class AutoScalerConfig:
    enable_task_auto_scaler: bool = False
    task_count_max: int | None = None
    task_count_min: int | None = None
    task_count_start: int | None = None
    min_trigger_scale_action_frequency_millis: int = 600_000
    auto_scaler_strategy: str = "lagBased"
    lag_collection_interval_millis: int = 30_000
    lag_collection_range_millis: int = 600_000
    scale_out_threshold: int = 6_000_000
    trigger_scale_out_fraction_threshold: float = 0.3
    scale_in_threshold: int = 1_000_000
    trigger_scale_in_fraction_threshold: float = 0.9
    scale_action_start_delay_millis: int = 300_000
    scale_action_period_millis: int = 60_000
    scale_in_step: int = 1
    scale_out_step: int = 2
    lag_aggregate: str = "SUM"
    stop_task_count_ratio: float | None = None

    # the older names of the trigger fractions (triggerScale*FractionThreshold), read by older Druid only
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"triggerScaleOutThresholdFrequency",
                                                    "triggerScaleInThresholdFrequency"})

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.enable_task_auto_scaler:
            if self.task_count_max is None or self.task_count_min is None:
                ctx.error(path, "taskCountMax and taskCountMin are required when enableTaskAutoScaler is true")
            elif self.task_count_min > self.task_count_max:
                ctx.error(join(path, "taskCountMin"), "taskCountMin must not exceed taskCountMax")
            ctx.warn(path, "the lag-based autoscaler is not applied: each run uses taskCount groups; set "
                     "microbatch.assignment: balanced to spread lag across groups")


_NO_BATCH = "there is no long-running supervisor process in batch ingestion"
MAX_TASK_COUNT = 1000
MAX_REPLICAS = 10
MAX_POLL_TIMEOUT_MS = 3_600_000  # an hour


@dataclass(frozen=True)
class IOConfig:
    input_format: InputFormat
    consumer_properties: dict[str, Any] = spec_field(secret_map=True)
    type: str = "kafka"
    topic: str | None = None
    topic_pattern: str | None = None
    poll_timeout: int = 100
    replicas: int = 1
    task_count: int = 1
    task_duration: Period = spec_field(default_factory=lambda: Period.parse("PT1H"))
    start_delay: Period = spec_field(default_factory=lambda: Period.parse("PT5S"), ignored_in_batch=_NO_BATCH)
    period: Period = spec_field(default_factory=lambda: Period.parse("PT30S"), ignored_in_batch=_NO_BATCH)
    use_earliest_offset: bool = False
    completion_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT30M"))
    late_message_rejection_start_date_time: datetime | None = None
    late_message_rejection_period: Period | None = None
    early_message_rejection_period: Period | None = None
    idle_config: IdleConfig | None = None
    auto_scaler_config: AutoScalerConfig | None = None
    stop_task_count: int | None = spec_field(None, ignored_in_batch=_NO_BATCH)
    config_overrides: dict[str, Any] | None = spec_field(None, ignored_in_batch="no task overrides in Spark jobs")
    emit_time_lag_metrics: bool = spec_field(False, ignored_in_batch="lag is reported by `ingest status`")
    server_priority_to_replicas: dict[str, Any] | None = spec_field(None, ignored_in_batch="no Druid servers")

    # Druid writes these when it exports a spec, or reads and ignores them (a batch ioConfig's appendToExisting);
    # `stream` and `useEarliestSequenceNumber`, its export copies of topic and useEarliestOffset: _export_aliases
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"multiTopic", "lagAggregator", "appendToExisting", "taskType",
                                                    "autoScalerEnabled"})

    def reads_topic(self, name: str) -> bool:
        """Whether this datasource reads topic `name`: its `topic`, or a whole-name match of `topicPattern`
        (Druid's rule, as the offset reader discovers topics)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, name) is not None
        return name == self.topic

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "kafka":
            ctx.error(join(path, "type"), f"only kafka is supported, got {shown(self.type)}")
        if self.topic and self.topic_pattern:
            ctx.error(join(path, "topicPattern"), "topic and topicPattern contradict each other: set only one")
        elif not self.topic and not self.topic_pattern:
            ctx.error(join(path, "topic"), "one of topic or topicPattern is required")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                ctx.error(join(path, "topicPattern"), f"not a valid regular expression: {exc}")
        if self.late_message_rejection_start_date_time and self.late_message_rejection_period:
            ctx.error(join(path, "lateMessageRejectionPeriod"),
                      "lateMessageRejectionStartDateTime and lateMessageRejectionPeriod contradict each other: "
                      "set only one")
        # each task group x replica is a Spark job per run: thousands of them is a typo, not a plan
        check_range(ctx, join(path, "taskCount"), self.task_count, minimum=1, maximum=MAX_TASK_COUNT)
        check_range(ctx, join(path, "replicas"), self.replicas, minimum=1, maximum=MAX_REPLICAS)
        check_range(ctx, join(path, "pollTimeout"), self.poll_timeout, minimum=1, maximum=MAX_POLL_TIMEOUT_MS)
        check_period(ctx, join(path, "taskDuration"), self.task_duration, allow_calendar=True)
        check_period(ctx, join(path, "completionTimeout"), self.completion_timeout)  # a timeout has a fixed length
        for name, key in (("late_message_rejection_period", "lateMessageRejectionPeriod"),
                          ("early_message_rejection_period", "earlyMessageRejectionPeriod")):
            p = getattr(self, name)
            if p is not None and (p.negative or p.is_zero):
                ctx.error(join(path, key), f"must be a positive period, got {p}")
        props_path = join(path, "consumerProperties")
        if "bootstrap.servers" not in self.consumer_properties:
            ctx.error(props_path, "bootstrap.servers is required (host:port of your Kafka brokers)")
        for key in ("enable.auto.commit", "auto.offset.reset"):
            if key in self.consumer_properties:
                ctx.warn(join(props_path, key), "ignored: offsets are tracked in the metadata store, not by Kafka")
        if self.isolation_level not in defaults.ISOLATION_LEVELS:
            ctx.error(join(props_path, "isolation.level"), f"must be {' or '.join(defaults.ISOLATION_LEVELS)}")

    @property
    def isolation_level(self) -> str:
        return str(self.consumer_properties.get("isolation.level", defaults.ISOLATION_LEVEL))
