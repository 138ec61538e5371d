"""Well-formed JSON records read into typed columns in one vectorized pass (pyarrow's JSON reader), beside
the per-record decoder: anything unusual gives None, and the caller decodes that chunk record by record, which
finds the records at fault. Both paths give the same rows."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.json as pa_json


def json_columns(values: list[bytes | None], schema: pa.Schema) -> dict[str, pa.Array] | None:
    """One JSON object per record, read as `schema`'s columns (other fields ignored), or None when a record is
    not a single object on one line, is not UTF-8, or does not fit the schema."""
    data = b"\n".join(values)  # type: ignore[arg-type]
    if data.count(b"\n") != len(values) - 1:
        return None  # a record holds a newline (several rows, or pretty-printed JSON)
    if not data.startswith(b"{") or data.count(b"\n{") != len(values) - 1:
        # a record that does not start as an object (`null`, `[1]`, `42`, leading blanks): the per-record path
        # says why; pyarrow 26's reader even crashes the process on a first line `null`
        return None
    if not data.isascii():
        try:  # pyarrow's reader keeps bytes that are not UTF-8: the per-record path finds those records
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1)),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows != len(values):
        return None
    return {name: table.column(name).combine_chunks() for name in table.column_names}
