"""A datasource's columns as Druid's SQL lists them (`SELECT *`, INFORMATION_SCHEMA.COLUMNS): `__time`, then the
dimensions in the spec's dimensionsSpec order, then the metrics in metricsSpec order; and each column's SQL type
as Druid names it (DATA_TYPE) with its java.sql.Types code (JDBC_TYPE).

A column the spec does not name (found by schema discovery, or left by an older spec) is a dimension: after the
named dimensions, in the order the segments first had it. Without a spec the store can read, the segments' order
stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ingest_core.core.errors import SpecError
from ingest_core.core.spec import parse_spec
from ingest_core.store.metadata import MetadataStore

TIME = "__time"


@dataclass(frozen=True)
class SpecColumns:
    """The columns a spec names, in its order."""

    dimensions: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()


def spec_columns(store: MetadataStore, datasource: str) -> SpecColumns:
    """The dimensions and metrics of the datasource's last spec the store registered (none: it has none, or it
    no longer reads)."""
    history = store.datasources.spec_history(datasource)
    if not history:
        return SpecColumns()
    try:
        spec = parse_spec(history[-1]["spec"], f"<metadata store: {datasource} v{history[-1]['version']}>")
    except SpecError:
        return SpecColumns()
    schema = spec.data_schema
    return SpecColumns(tuple(d.name for d in schema.dimensions_spec.dimensions),
                       tuple(m.name for m in schema.metrics_spec))


def in_druid_order(types: Mapping[str, str], spec: SpecColumns) -> dict[str, str]:
    """`types` (column -> type, in the segments' order) in Druid's order."""
    metrics = [m for m in spec.metrics if m in types and m != TIME]
    named = [d for d in spec.dimensions if d in types and d not in metrics and d != TIME]
    rest = [c for c in types if c != TIME and c not in named and c not in metrics]
    order = ([TIME] if TIME in types else []) + named + rest + metrics
    return {c: types[c] for c in order}


@dataclass(frozen=True)
class SqlType:
    """A column's type as Druid's INFORMATION_SCHEMA.COLUMNS writes it. The precisions are Druid's type system's
    (Calcite's defaults, and milliseconds for TIMESTAMP); what is not known here (a double's scale, a string's
    character set) is null."""

    name: str  # DATA_TYPE: Calcite's type name, or a complex type's own (COMPLEX<json>)
    jdbc: int  # JDBC_TYPE: its java.sql.Types code
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None

    @property
    def numeric(self) -> bool:
        return self.numeric_precision is not None


ARRAY, OTHER = 2003, 1111  # java.sql.Types
_SIMPLE = {"TIMESTAMP": SqlType("TIMESTAMP", 93, datetime_precision=3), "STRING": SqlType("VARCHAR", 12),
           "LONG": SqlType("BIGINT", -5, 19, 0), "DOUBLE": SqlType("DOUBLE", 8, 15), "FLOAT": SqlType("FLOAT", 6, 15)}


def sql_type(kind: str) -> SqlType:
    """A column type (`core.column_types`) as Druid's SQL names it: arrays are Calcite's ARRAY, complex types
    (COMPLEX<json>, a sketch) Calcite's OTHER under their own name."""
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind.startswith("ARRAY"):
        return SqlType("ARRAY", ARRAY)
    return SqlType(kind, OTHER)
