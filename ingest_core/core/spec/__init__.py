"""Datasource specs: Druid's Kafka supervisor spec, typed, with Druid's defaults, plus this system's `microbatch`.

Accepted shapes (JSON is YAML, so a Druid supervisor JSON loads as-is):
  - current: `{type: kafka, spec: {dataSchema, ioConfig, tuningConfig}, suspended, microbatch}`
  - older flat shape: `{type: kafka, dataSchema, ioConfig, tuningConfig, microbatch}`

`load_spec(path)` returns a `DatasourceSpec` or raises `SpecError` listing every problem with its field path.
Leniency follows Druid's: a field Druid does not know is ignored there, so here it is a warning with its path and a
did-you-mean (`spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)`), and an error with
`strict=True` and in this system's own sections (`microbatch`, `compaction`). Fields Druid writes when it exports
a spec load without a word (`_IGNORED`, `_export_aliases`, `_exported_copies`); Druid fields that mean nothing
to a bounded batch job load with a warning when set (`DatasourceSpec.warnings`). An explicit `null` is the field
left out. A `.json` file is read as JSON, others as YAML; both refuse a key given twice.

One module per section of the spec, as Druid keeps `IdleConfig` and `SeekableStreamSupervisorIOConfig` apart:
`data_schema`, `metrics` (metricsSpec), `input_format`, `io_config`, `tuning_config`, `microbatch`, `compaction`;
`datasource` binds a whole spec from them and `files` reads specs from text and folders. The names imported
here are the package's interface: code imports them from `ingest_core.core.spec`.
"""

from ingest_core.core.granularity import GRANULARITY_PERIODS, Granularity
from ingest_core.core.spec.druid import INT32_MAX, TIME_COLUMN
from ingest_core.core.spec.data_schema import (
    COMPACTION_DAG_SUFFIX,
    compaction_dag_id,
    DIMENSION_TYPES,
    DataSchema,
    Dimension,
    DimensionsSpec,
    GranularitySpec,
    MULTI_VALUE_HANDLING,
    SEGMENT_ALL,
    TimestampSpec,
    Transform,
    TransformSpec,
    datasource_name_problem,
)
from ingest_core.core.spec.metrics import Aggregator
from ingest_core.core.spec.input_format import (
    FLATTEN_FIELD_TYPES,
    FlattenField,
    FlattenSpec,
    INPUT_FORMAT_TYPES,
    InputFormat,
    PROTO_DECODER_TYPES,
    ProtoBytesDecoder,
)
from ingest_core.core.spec.io_config import (
    AutoScalerConfig,
    IOConfig,
    IdleConfig,
    MAX_POLL_TIMEOUT_MS,
    MAX_REPLICAS,
    MAX_TASK_COUNT,
)
from ingest_core.core.spec.tuning_config import MAX_RECORDS_PER_POLL, MAX_SAVED_PARSE_EXCEPTIONS, TuningConfig
from ingest_core.core.spec.microbatch import (
    DEAD_LETTER_RESERVED,
    DataGate,
    DeadLetter,
    DeepStorage,
    HealthConfig,
    IcebergTable,
    Microbatch,
    S3Config,
    SparkConfig,
)
from ingest_core.core.spec.compaction import Compaction, CompactionGranularity, CompactionTuning, Kill, PartitionsSpec
from ingest_core.core.spec.datasource import DatasourceSpec, parse_spec
from ingest_core.core.spec.files import (
    MAX_SPEC_BYTES,
    SPEC_SUFFIXES,
    find_spec_files,
    load_spec,
    parse_spec_text,
    read_spec_document,
    read_spec_file,
)

__all__ = [
    "MAX_SPEC_BYTES",
    "Aggregator",
    "AutoScalerConfig",
    "COMPACTION_DAG_SUFFIX",
    "compaction_dag_id",
    "Compaction",
    "CompactionGranularity",
    "CompactionTuning",
    "DEAD_LETTER_RESERVED",
    "DIMENSION_TYPES",
    "DataGate",
    "DataSchema",
    "DatasourceSpec",
    "DeadLetter",
    "DeepStorage",
    "Dimension",
    "DimensionsSpec",
    "FLATTEN_FIELD_TYPES",
    "FlattenField",
    "FlattenSpec",
    "GRANULARITY_PERIODS",
    "Granularity",
    "GranularitySpec",
    "HealthConfig",
    "INPUT_FORMAT_TYPES",
    "INT32_MAX",
    "IOConfig",
    "IcebergTable",
    "IdleConfig",
    "InputFormat",
    "Kill",
    "MAX_POLL_TIMEOUT_MS",
    "MAX_RECORDS_PER_POLL",
    "MAX_REPLICAS",
    "MAX_SAVED_PARSE_EXCEPTIONS",
    "MAX_TASK_COUNT",
    "MULTI_VALUE_HANDLING",
    "Microbatch",
    "S3Config",
    "PROTO_DECODER_TYPES",
    "PartitionsSpec",
    "ProtoBytesDecoder",
    "SEGMENT_ALL",
    "SPEC_SUFFIXES",
    "SparkConfig",
    "TIME_COLUMN",
    "TimestampSpec",
    "Transform",
    "TransformSpec",
    "TuningConfig",
    "datasource_name_problem",
    "find_spec_files",
    "load_spec",
    "parse_spec",
    "parse_spec_text",
    "read_spec_document",
    "read_spec_file",
]
