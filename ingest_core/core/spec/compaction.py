"""`compaction`: the compaction DAG's section (Druid's auto-compaction config) and kill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest_core.core import defaults
from ingest_core.core.binding import BindContext, check_period, check_range, join, spec_field
from ingest_core.core.cron import cron_problem
from ingest_core.core.errors import shown
from ingest_core.core.granularity import Granularity
from ingest_core.core.periods import Period


@dataclass(frozen=True)
class PartitionsSpec:
    type: str = "dynamic"
    max_rows_per_segment: int = defaults.COMPACTION_MAX_ROWS_PER_SEGMENT
    max_total_rows: int | None = spec_field(None, ignored_in_batch="a compaction run writes each interval apart")

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "dynamic":
            ctx.error(join(path, "type"), f"partitionsSpec type {shown(self.type)} is not supported; use dynamic "
                      "(segments of at most maxRowsPerSegment rows)")
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1)


@dataclass(frozen=True)
class CompactionTuning:
    partitions_spec: PartitionsSpec = spec_field(default_factory=PartitionsSpec)


@dataclass(frozen=True)
class CompactionGranularity:
    segment_granularity: Granularity | None = None  # default: the datasource's


@dataclass(frozen=True)
class Kill:
    """Deleting the segments compaction made unused (Druid's kill), `bufferPeriod` after they became unused:
    long enough for any reader that listed them before (a query, an Iceberg snapshot) to be done."""

    enabled: bool = True
    buffer_period: Period = spec_field(default_factory=lambda: Period.parse(defaults.KILL_BUFFER_PERIOD))

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_period(ctx, join(path, "bufferPeriod"), self.buffer_period, allow_zero=True)


@dataclass(frozen=True)
class Compaction:
    """Druid's auto-compaction, per datasource (its compaction config's field names): the visible segments of
    each interval older than `skipOffsetFromLatest` are rewritten, rolled up again, into as few segments of at
    most `maxRowsPerSegment` rows as they need, optionally of a coarser `segmentGranularity`, as a new version
    that overshadows them. `schedule` (this system's own) is the compaction DAG's."""

    enabled: bool = True
    data_source: str | None = None  # Druid's config names it; here it must be the spec's, if given
    skip_offset_from_latest: Period = spec_field(default_factory=lambda: Period.parse(defaults.COMPACTION_SKIP_OFFSET))
    tuning_config: CompactionTuning = spec_field(default_factory=CompactionTuning)
    granularity_spec: CompactionGranularity = spec_field(default_factory=CompactionGranularity)
    max_rows_per_segment: int | None = None  # Druid's older top-level spelling of partitionsSpec's
    schedule: str = defaults.COMPACTION_SCHEDULE
    kill: Kill = spec_field(default_factory=Kill)
    task_priority: int | None = spec_field(None, ignored_in_batch="compaction runs as its own Airflow DAG")
    input_segment_size_bytes: int | None = spec_field(None, ignored_in_batch="each interval is compacted whole")
    task_context: dict[str, Any] | None = spec_field(None, ignored_in_batch="no Druid task context")

    @property
    def target_rows(self) -> int:
        return self.max_rows_per_segment or self.tuning_config.partitions_spec.max_rows_per_segment

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_period(ctx, join(path, "skipOffsetFromLatest"), self.skip_offset_from_latest, allow_zero=True,
                     allow_calendar=True)
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1)
        if self.schedule.upper().startswith(("P", "-P")):
            try:
                check_period(ctx, join(path, "schedule"), Period.parse(self.schedule), allow_calendar=True)
            except ValueError as exc:
                ctx.error(join(path, "schedule"), str(exc))
        else:
            problem = cron_problem(self.schedule)
            if problem:
                ctx.error(join(path, "schedule"), problem)
        target = self.granularity_spec.segment_granularity
        if target is not None and target.period is None:
            ctx.error(join(join(path, "granularitySpec"), "segmentGranularity"),
                      f"{target.name} is not supported: segments need a time bucket; use e.g. YEAR")
