"""The whole spec: `DatasourceSpec` and `parse_spec`, which binds a raw spec's sections with every problem's path."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ingest_core.core import secrets as credentials
from ingest_core.core.binding import MISSING_VALUE, BindContext, bind_object, bind_value, did_you_mean, join, to_raw
from ingest_core.core.errors import SpecError, SpecProblem, shown
from ingest_core.core.legacy_parser import convert_parser
from ingest_core.core.spec.compaction import Compaction
from ingest_core.core.spec.data_schema import DataSchema
from ingest_core.core.spec.io_config import IOConfig
from ingest_core.core.spec.microbatch import Microbatch
from ingest_core.core.spec.tuning_config import TuningConfig


@dataclass(frozen=True)
class DatasourceSpec:
    data_schema: DataSchema
    io_config: IOConfig
    tuning_config: TuningConfig = field(default_factory=TuningConfig)
    microbatch: Microbatch = field(default_factory=Microbatch)
    compaction: Compaction | None = None
    suspended: bool = False
    source: str = "<spec>"
    warnings: tuple[SpecProblem, ...] = ()

    @property
    def datasource(self) -> str:
        return self.data_schema.data_source

    def to_raw(self) -> dict[str, Any]:
        """The normalized spec in the current nested shape, secrets redacted (safe to store and show)."""
        io = to_raw(self.io_config)
        io["consumerProperties"] = credentials.redact_properties(self.io_config.consumer_properties)
        return {
            "type": "kafka",
            "spec": {"dataSchema": to_raw(self.data_schema), "ioConfig": io, "tuningConfig": to_raw(self.tuning_config)},
            "suspended": self.suspended,
            "microbatch": to_raw(self.microbatch),
            **({"compaction": to_raw(self.compaction)} if self.compaction is not None else {}),
        }

    @property
    def has_literal_secrets(self) -> bool:
        return (credentials.REDACTED in self.to_raw()["spec"]["ioConfig"]["consumerProperties"].values()
                or self.io_config.input_format.has_literal_secrets)

    def with_secrets_from(self, original: "DatasourceSpec") -> "DatasourceSpec":
        """This spec (a redacted copy, e.g. staged for a Spark job) with the literal secrets of `original`, the
        spec file it was made from: only for building a Kafka client, never for storing or printing."""
        if original.datasource != self.datasource:
            raise SpecError(original.source, [SpecProblem("spec.dataSchema.dataSource", (
                f"is {original.datasource!r}, not {self.datasource!r}: not the spec this copy was made from"))])
        props = credentials.restore_literals(self.io_config.consumer_properties,
                                             original.io_config.consumer_properties, original.source)
        fmt = self.io_config.input_format
        if original.io_config.input_format._to_raw() == fmt._to_raw():  # the same format, its credentials redacted
            fmt = original.io_config.input_format
        return dataclasses.replace(self, io_config=dataclasses.replace(self.io_config, consumer_properties=props,
                                                                       input_format=fmt))

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_raw(), sort_keys=True).encode()).hexdigest()[:16]


_TOP_KEYS = {"type", "spec", "suspended", "microbatch", "compaction", "context", "id"}  # context, id: no effect
_SECTION_KEYS = {"dataSchema", "ioConfig", "tuningConfig"}


def parse_spec(raw: Any, source: str = "<spec>", *, strict: bool = False) -> DatasourceSpec:
    """Bind a raw supervisor spec (already parsed from JSON/YAML). Raises SpecError with every problem.
    `strict`: unknown fields are errors in Druid's sections too (they are warnings there otherwise)."""
    ctx = BindContext(strict)
    if not isinstance(raw, dict):
        raise SpecError(source, [SpecProblem("", "a datasource spec must be an object with type: kafka and spec")])
    legacy = convert_parser(raw)  # Druid's deprecated dataSchema.parser, in today's form
    if legacy is not None:
        raw = legacy.raw
        ctx.errors.extend(legacy.problems)
        for unknown in legacy.unknown:
            ctx.unknown(unknown.path, unknown.message)
        if legacy.warning:
            ctx.warn(legacy.path, legacy.warning)
    kind = raw.get("type")
    if kind != "kafka":
        ctx.error("type", f"supervisor type must be 'kafka', got {shown(kind)}")
    if raw.get("spec") is not None:
        prefix = "spec"
        sections = raw["spec"]
        if not isinstance(sections, dict):
            raise SpecError(source, [SpecProblem("spec", "expected an object with dataSchema, ioConfig, tuningConfig")])
        for key in sections:
            if key not in _SECTION_KEYS and sections[key] is not None:
                ctx.unknown(join("spec", str(key)), "unknown field" + did_you_mean(str(key), _SECTION_KEYS))
        _exported_copies(raw, sections, ctx)
    else:
        prefix, sections = "", raw
    for key in raw:
        if key not in _TOP_KEYS and key not in _SECTION_KEYS and raw[key] is not None:
            ctx.unknown(str(key), "unknown field" + did_you_mean(str(key), _TOP_KEYS | _SECTION_KEYS))

    data_schema = _bind_section(DataSchema, sections, "dataSchema", prefix, ctx)
    io_raw = sections.get("ioConfig")
    if isinstance(io_raw, dict):
        io_path = join(prefix, "ioConfig")
        props = _bind_consumer_properties(io_raw.get("consumerProperties"), join(io_path, "consumerProperties"), ctx)
        # Secret references are bound above; a failure there is already reported, so bind the rest with a
        # placeholder to report the other fields' problems too.
        io_raw = {**_export_aliases(io_raw, io_path, ctx),
                  "consumerProperties": props if props is not MISSING_VALUE else {"bootstrap.servers": ""}}
    io_config = _bind_section(IOConfig, {**sections, "ioConfig": io_raw}, "ioConfig", prefix, ctx)
    tuning = _bind_section(TuningConfig, sections, "tuningConfig", prefix, ctx, required=False) or TuningConfig()
    with ctx.own_section():  # this system's own sections: nothing in them is Druid's to ignore
        micro = Microbatch()
        if raw.get("microbatch") is not None:
            micro = bind_object(Microbatch, raw["microbatch"], "microbatch", ctx)
        compaction = None
        if raw.get("compaction") is not None:
            compaction = bind_object(Compaction, raw["compaction"], "compaction", ctx)
    if compaction is not None:
        if (compaction is not MISSING_VALUE and data_schema is not MISSING_VALUE and compaction.data_source
                not in (None, data_schema.data_source)):
            ctx.error("compaction.dataSource", f"is {compaction.data_source!r}, but this spec's dataSource is "
                      f"{data_schema.data_source!r}: a spec's compaction is its own datasource's")
        target = compaction.granularity_spec.segment_granularity if compaction is not MISSING_VALUE else None
        source_granularity = (data_schema.granularity_spec.segment_granularity
                              if data_schema is not MISSING_VALUE else None)
        if target is not None and target.period is not None and source_granularity is not None and not target.holds(
                source_granularity):
            ctx.error("compaction.granularitySpec.segmentGranularity",
                      f"{target.name} does not hold whole {source_granularity.name} segments (the spec's "
                      "segmentGranularity): compaction only coarsens, e.g. HOUR into DAY, DAY into MONTH")
    suspended = bind_value(bool, False if raw.get("suspended") is None else raw["suspended"], "suspended", ctx)

    if ctx.errors or MISSING_VALUE in (data_schema, io_config, tuning, micro, compaction, suspended):
        if not ctx.errors:  # pragma: no cover - a binder failure always records an error
            ctx.error("", "spec could not be bound")
        raise SpecError(source, legacy.traced(ctx.errors) if legacy is not None else ctx.errors)
    return DatasourceSpec(
        data_schema=data_schema,
        io_config=io_config,
        tuning_config=tuning,
        microbatch=micro,
        compaction=compaction,
        suspended=suspended,
        source=source,
        warnings=tuple(ctx.warnings),
    )


def _exported_copies(raw: dict[str, Any], sections: dict[str, Any], ctx: BindContext) -> None:
    """Druid's `GET /druid/indexer/v1/supervisor/<id>` writes dataSchema, ioConfig and tuningConfig twice: inside
    `spec` and beside it. With `spec` present Druid reads only spec's (KafkaSupervisorSpec), so an equal copy is
    nothing to mention and a different one is ignored, with a word."""
    for key in sorted(_SECTION_KEYS & set(raw)):
        if raw[key] is None or raw[key] == sections.get(key):
            continue
        if key in sections:
            ctx.warn(key, f"ignored: differs from spec.{key}, which is the one Druid reads (an exported spec holds "
                     "two equal copies): remove this one")
        else:
            ctx.warn(key, f"ignored: with `spec` present Druid reads spec.{key} only: move it inside spec (or drop "
                     "'spec' and use the flat shape)")


def _export_aliases(io_raw: dict[str, Any], path: str, ctx: BindContext) -> dict[str, Any]:
    """ioConfig without the copies Druid's export writes beside the Kafka fields: `stream` (the topic, or the
    topicPattern) and `useEarliestSequenceNumber` (useEarliestOffset). An equal copy loads without a word; a
    `stream` that names another topic is an error (which one was meant?)."""
    out = {k: v for k, v in io_raw.items() if k not in ("stream", "useEarliestSequenceNumber")}
    stream = io_raw.get("stream")
    named = io_raw.get("topic") if io_raw.get("topic") is not None else io_raw.get("topicPattern")
    if stream is not None and named is None:
        ctx.error(join(path, "stream"), "this is a Kinesis field; Kafka uses 'topic'")
    elif stream is not None and stream != named:
        ctx.error(join(path, "stream"), f"is {stream!r}, but the topic is {named!r}: Druid writes stream as a copy of "
                  "topic (or topicPattern) when it exports a spec; remove it, or make it the topic")
    alias = io_raw.get("useEarliestSequenceNumber")
    given = io_raw.get("useEarliestOffset")
    if alias is not None and str(alias).lower() != str(False if given is None else given).lower():
        if given is None:
            ctx.warn(join(path, "useEarliestSequenceNumber"), "ignored: Kafka's field is useEarliestOffset (Druid "
                     "ignores useEarliestSequenceNumber for Kafka too): rename it")
        else:
            ctx.warn(join(path, "useEarliestSequenceNumber"), f"ignored: useEarliestOffset ({given}) is the field "
                     "Kafka reads; an exported spec holds two equal copies")
    return out


def _bind_section(cls: type, sections: dict, key: str, prefix: str, ctx: BindContext, required: bool = True) -> Any:
    path = join(prefix, key)
    if key not in sections or sections[key] is None:
        if required:
            ctx.error(path, "required section is missing")
            return MISSING_VALUE
        return None
    return bind_object(cls, sections[key], path, ctx)


def _bind_consumer_properties(raw: Any, path: str, ctx: BindContext) -> Any:
    if raw is None:
        ctx.error(path, "required field is missing (it needs at least bootstrap.servers)")
        return MISSING_VALUE
    if not isinstance(raw, dict):
        ctx.error(path, "expected an object of Kafka consumer properties")
        return MISSING_VALUE
    props, problems = credentials.expand_dynamic_provider(raw)
    for problem in problems:
        ctx.error(join(path, credentials.DYNAMIC_PROVIDER_KEY), problem)
    out: dict[str, Any] = {}
    for key, value in props.items():
        if isinstance(value, dict):
            ref, problem = credentials.parse_secret_ref(value)
            if problem:
                ctx.error(join(path, key), problem)
            else:
                out[key] = ref
        elif isinstance(value, (str, int, float, bool)):
            out[key] = value
        elif isinstance(value, credentials.EnvironmentSecret):  # from druid.dynamic.config.provider
            out[key] = value
        else:
            # never echo the value: it may be a secret
            ctx.error(join(path, key), "expected a string, number, boolean or secret reference")
    return out
