"""`tuningConfig`: memory and parse-exception limits; Druid's persist and chat settings, ignored here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ingest_core.core.binding import BindContext, check_range, join, spec_field
from ingest_core.core.errors import shown
from ingest_core.core.periods import Period
from ingest_core.core.spec.druid import INT32_MAX


MAX_SAVED_PARSE_EXCEPTIONS = 10_000  # kept in the task report and the metadata store
MAX_RECORDS_PER_POLL = 10_000_000  # one parsed chunk is held in memory
_NO_PERSIST = "Spark writes each segment once; there are no intermediate persists or handoffs"
_NO_CHAT = "there are no indexing tasks to talk to; Airflow and Spark handle task communication"


@dataclass(frozen=True)
class TuningConfig:
    type: str = "kafka"
    max_rows_in_memory: int = 150_000  # rows a split rolls up in memory before handing them to Spark
    max_bytes_in_memory: int = spec_field(0, ignored_in_batch="Spark manages memory")
    skip_bytes_in_memory_overhead_check: bool = spec_field(False, ignored_in_batch="Spark manages memory")
    max_rows_per_segment: int = 5_000_000
    max_total_rows: int | None = spec_field(20_000_000, ignored_in_batch=_NO_PERSIST)
    intermediate_handoff_period: Period = spec_field(default_factory=lambda: Period.parse("P2147483647D"),
                                                     ignored_in_batch=_NO_PERSIST)
    intermediate_persist_period: Period = spec_field(default_factory=lambda: Period.parse("PT10M"),
                                                     ignored_in_batch=_NO_PERSIST)
    max_pending_persists: int = spec_field(0, ignored_in_batch=_NO_PERSIST)
    # Druid's segment format settings, written on every export: segments here are Parquet files (no warning)
    index_spec: dict[str, Any] | None = None
    index_spec_for_intermediate_persists: dict[str, Any] | None = None
    report_parse_exceptions: bool = False
    handoff_condition_timeout: int = spec_field(900_000, ignored_in_batch="segments are visible once published")
    reset_offset_automatically: bool = False
    worker_threads: int | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_threads: int | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_async: bool | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_retries: int = spec_field(8, ignored_in_batch=_NO_CHAT)
    http_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT10S"), ignored_in_batch=_NO_CHAT)
    shutdown_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT80S"), ignored_in_batch=_NO_CHAT)
    offset_fetch_period: Period = spec_field(default_factory=lambda: Period.parse("PT30S"),
                                             ignored_in_batch="offsets are read when a run is planned and by `ingest status`")
    segment_write_out_medium_factory: dict[str, Any] | None = None  # as indexSpec: segments are Parquet files
    num_persist_threads: int = spec_field(1, ignored_in_batch=_NO_PERSIST)
    max_columns_to_merge: int = spec_field(-1, ignored_in_batch=_NO_PERSIST)
    base_persist_directory: str | None = spec_field(None, ignored_in_batch=_NO_PERSIST)
    build_v9_directly: bool = spec_field(True, ignored_in_batch="segments are Parquet files")
    log_parse_exceptions: bool = False
    max_parse_exceptions: int | None = None  # unlimited
    max_saved_parse_exceptions: int = 0
    partitions_spec: dict[str, Any] | None = spec_field(None, ignored_in_batch="segments split by maxRowsPerSegment")
    max_records_per_poll: int | None = None  # records per consumer poll, one parsed chunk; default 20,000

    # Druid writes these when it exports a spec (appendableIndexSpec, Kinesis' skipSequenceNumberAvailabilityCheck
    # and repartitionTransitionDuration on every seekable-stream tuningConfig) or reads and ignores them
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"appendableIndexSpec", "skipSequenceNumberAvailabilityCheck",
                                                    "repartitionTransitionDuration", "workerCategory"})

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "kafka":
            ctx.error(join(path, "type"), f"only kafka is supported, got {shown(self.type)}")
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxRowsInMemory"), self.max_rows_in_memory, minimum=1, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxParseExceptions"), self.max_parse_exceptions, minimum=0, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxSavedParseExceptions"), self.max_saved_parse_exceptions, minimum=0,
                    maximum=MAX_SAVED_PARSE_EXCEPTIONS)
        check_range(ctx, join(path, "maxRecordsPerPoll"), self.max_records_per_poll, minimum=1,
                    maximum=MAX_RECORDS_PER_POLL)

    @property
    def effective_max_parse_exceptions(self) -> int | None:
        """Druid: reportParseExceptions overrides maxParseExceptions with 0."""
        return 0 if self.report_parse_exceptions else self.max_parse_exceptions

    @property
    def effective_max_saved_parse_exceptions(self) -> int:
        return min(self.max_saved_parse_exceptions, 1) if self.report_parse_exceptions else self.max_saved_parse_exceptions
