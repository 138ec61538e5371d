"""`ingest validate --connect`: the schema registries a spec's decoders name answer, and hold its topics' subjects.

Druid's `schema_registry` decoders (`avroBytesDecoder` of `avro_stream`, `protoBytesDecoder` of `protobuf`, also
inside the `kafka` wrapper's valueFormat and keyFormat) look each record's schema up by the id it carries.
Producers register those schemas under subjects, by default under Confluent's TopicNameStrategy: `<topic>-value`
for values, `<topic>-key` for keys. A registry that does not answer, or that lacks the subject, would make every
record unparseable: this says so before the first run.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ingest_core.core.avro_schema import SchemaRegistryDecoder
from ingest_core.core.binding import did_you_mean
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor.formats.schema_registry import (
    RegistryConfig,
    RegistryUnavailableError,
    SchemaRegistryClient,
    SchemaRegistryError,
    UnknownSchemaError,
)

# the inputFormat types with a registry decoder: the decoder's field, and the schemaType it reads
DECODER_FIELDS = {"avro_stream": ("avroBytesDecoder", "AVRO"), "protobuf": ("protoBytesDecoder", "PROTOBUF")}


@dataclass(frozen=True)
class RegistryDecoder:
    path: str         # where in the spec, e.g. spec.ioConfig.inputFormat.valueFormat.avroBytesDecoder
    format_type: str  # avro_stream or protobuf
    part: str         # value or key: the subject's suffix under TopicNameStrategy
    decoder: Mapping[str, Any]  # Druid's fields: url or urls, config, headers

    @property
    def schema_type(self) -> str:
        return DECODER_FIELDS[self.format_type][1]


def registry_decoders(input_format: Any, path: str = "spec.ioConfig.inputFormat",
                      part: str = "value") -> list[RegistryDecoder]:
    """The `schema_registry` decoders of a raw inputFormat dict (and of a `kafka` wrapper's value and key)."""
    if not isinstance(input_format, Mapping):
        return []
    kind = input_format.get("type")
    if kind == "kafka":
        return [*registry_decoders(input_format.get("valueFormat"), f"{path}.valueFormat", "value"),
                *registry_decoders(input_format.get("keyFormat"), f"{path}.keyFormat", "key")]
    if kind not in DECODER_FIELDS:
        return []
    key = DECODER_FIELDS[kind][0]
    decoder = input_format.get(key)
    default = "schema_registry" if kind == "protobuf" else None  # Druid's default protoBytesDecoder
    if not isinstance(decoder, Mapping) or decoder.get("type", default) != "schema_registry":
        return []
    return [RegistryDecoder(f"{path}.{key}", kind, part, decoder)]


@dataclass
class RegistryCheck:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_registries(decoders: list[RegistryDecoder], topic: str | None, topic_pattern: str | None,
                     retry_delays: tuple[float, ...] = (0.5,), timeout: float = 5.0) -> RegistryCheck:
    """Ask each decoder's registry for its subjects, and each subject the topic(s) need for its schema type."""
    check = RegistryCheck()
    for d in decoders:
        try:
            # the executors' settings exactly (mapString provider included): what validates is what reads
            registry = RegistryConfig.of_decoder(SchemaRegistryDecoder(
                "schema_registry", d.decoder.get("url"), d.decoder.get("urls"), None,
                dict(d.decoder.get("config") or {}), dict(d.decoder.get("headers") or {})))
        except (ValueError, TypeError, AttributeError) as exc:
            check.errors.append(f"{d.path}: {exc}")
            continue
        answered, unanswered = None, []
        for url in registry.urls:  # each on its own: Druid fails over between them, so all should answer
            client = SchemaRegistryClient(RegistryConfig((url,), registry.config, registry.headers),
                                          retry_delays=retry_delays, timeout=timeout)
            try:
                subjects = client.get_json("/subjects")
            except UnknownSchemaError:
                unanswered.append(f"{d.path}: {url} answered 404 to GET /subjects: it is not the base url of a "
                                  "Confluent-compatible Schema Registry API (Apicurio Registry serves it at "
                                  "http://HOST:PORT/apis/ccompat/v7)")
                continue
            except RegistryUnavailableError as exc:
                unanswered.append(f"{d.path}: {exc}")
                continue
            except SchemaRegistryError as exc:
                unanswered.append(f"{d.path}: {exc}")
                continue
            if not isinstance(subjects, list):
                unanswered.append(f"{d.path}: {url} answered GET /subjects with {type(subjects).__name__}, not a "
                                  "list of subjects: it is not a Confluent-compatible Schema Registry API")
                continue
            if answered is None:
                answered = (url, client, [str(s) for s in subjects])
        if answered is None:
            check.errors.extend(unanswered)
            continue
        check.warnings.extend(unanswered)
        check.errors.extend(_subject_problems(d, *answered, topic, topic_pattern))
    return check


def _subject_problems(d: RegistryDecoder, url: str, client: SchemaRegistryClient, subjects: list[str],
                      topic: str | None, topic_pattern: str | None) -> list[str]:
    suffix = f"-{d.part}"
    if topic_pattern is not None:
        wanted = [s for s in subjects if s.endswith(suffix) and re.fullmatch(topic_pattern, s[:-len(suffix)])]
        if not wanted:
            return [(f"{d.path}: no subject of schema registry {url} matches topicPattern {topic_pattern!r} "
                     f"as '<topic>{suffix}'; {_listing(subjects)}. {_REGISTER_HINT}")]
    else:
        want = f"{topic}{suffix}"
        if want not in subjects:
            return [(f"{d.path}: subject {want!r} is not in schema registry {url}{did_you_mean(want, subjects)} "
                     f"; {_listing(subjects)}. {_REGISTER_HINT}")]
        wanted = [want]
    problems = []
    for subject in wanted:
        try:
            latest = client.get_json(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        except SchemaRegistryError as exc:
            problems.append(f"{d.path}: reading subject {subject!r} from schema registry {url} failed: {exc}")
            continue
        found = str(latest.get("schemaType") or "AVRO") if isinstance(latest, Mapping) else "?"
        if found != d.schema_type:
            problems.append(f"{d.path}: subject {subject!r} of schema registry {url} holds {found} schemas, but "
                            f"{d.format_type} reads {d.schema_type}: use the inputFormat that matches the "
                            "producers' serializer")
    return problems


_REGISTER_HINT = ("Under Confluent's default TopicNameStrategy a producer's serializer registers it with its "
                  "first record: produce one, or register the schema (POST <url>/subjects/<subject>/versions); "
                  "or fix the decoder's url or the topic")


def _listing(subjects: list[str]) -> str:
    if not subjects:
        return "it has no subjects"
    shown = sorted(subjects)[:10]
    return (f"it has {len(subjects)} subject{'s' if len(subjects) > 1 else ''}: {', '.join(shown)}"
            f"{', …' if len(subjects) > len(shown) else ''}")


def check_spec_registries(spec: DatasourceSpec) -> RegistryCheck:
    """`check_registries` for the decoders of a loaded spec (read from its raw form: the decoders' own fields,
    credentials unredacted: `to_raw` redacts them)."""
    decoders = registry_decoders(spec.io_config.input_format._to_raw(redact=False))
    return check_registries(decoders, spec.io_config.topic, spec.io_config.topic_pattern)
