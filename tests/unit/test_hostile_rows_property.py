"""Property-based (Hypothesis): generated hostile records through the real RowParser and PartialRollup, for
json, csv and the kafka wrapper format. Whatever arrives: no exception escapes; every record is rows,
thrownAway or unparseable (processedWithError rows are rows with a null), and the counts add up; the
Rejections list exactly the rows not ingested as sent; every kept number is the number sent; the written
segment reads back; the partial rollup's longSums are exact. Deterministic (derandomize) and bounded."""

from __future__ import annotations

import io
import json
import math
import struct
from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_core.core.spec import parse_spec
from ingest_core.executor.formats.json_columns import json_columns
from ingest_core.executor.rollup import PartialRollup, aggregators, long_sum_value
from ingest_core.executor.row_parser import OFFSET, TIME, RecordChunk, RowParser
from ingest_core.handover.report import Outcome

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT_EDGES = [0, 1, -1, 2 ** 31, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, 2 ** 64, 10 ** 30]
FLOAT_EDGES = [1.5, -2.5, 1e20, -1e30, 1e300, 9.2e18, 9.3e18, 2.0 ** 63, -(2.0 ** 63), 3.4028234663852886e38,
               3.5e38, 5e-324, -0.0, math.nan, math.inf, -math.inf]
TEXT_EDGES = ["7", " 12 ", "1_000", "\u0663", "NaN", "Infinity", "-Infinity", "1e300", "9223372036854775808", "-1.5", "", "x",
              "nul\x00", "\ud800", "é😀"]
TIME_EDGES = ["2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9998-12-31T23:59:59.999Z", "9999-01-01T00:00:00Z",
              "9999-12-31T23:59:59Z", "1677-09-21T00:12:43Z", "2262-04-11T23:47:16.855Z", "1969-12-31T23:59:59.999Z",
              "yesterday", "", 1767225600000, -62135596800000, -62135596800001, 253370764799999, 253370764800000,
              2 ** 62, -(2 ** 63), 2 ** 64, 1e300, math.nan]

scalars = st.one_of(st.sampled_from(INT_EDGES), st.integers(), st.sampled_from(FLOAT_EDGES), st.floats(),
                    st.sampled_from(TEXT_EDGES), st.text(max_size=8), st.booleans(), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                      max_leaves=6)
times = st.one_of(st.sampled_from(TIME_EDGES), st.integers(-(2 ** 64), 2 ** 64))
obj = st.fixed_dictionaries({"ts": times}, optional={"a": values, "n": values, "x": values, "f": values,
                                                     "m": values, "dl": values})
clean = st.fixed_dictionaries({"ts": st.sampled_from(TIME_EDGES[:4]), "a": st.text(max_size=5),
                               "n": st.integers(-(2 ** 63), 2 ** 63 - 1), "x": st.floats(-1e10, 1e10),
                               "f": st.floats(-1e6, 1e6), "m": st.integers(-1000, 1000)})


def _dumps(doc: dict) -> bytes:
    # NaN/Infinity as the JSON tokens Python writes; lone surrogates as escapes (ensure_ascii)
    return json.dumps(doc).encode()


RAW = [None, b"", b"[1, 2]", b"42", b'"text"', b"null", b"{not json", b'{"ts": "2026-01-01T00:00:00Z", "a": "x\xff"}',
       b'{"ts": "2026-01-01T00:00:00Z", "a": "\\udc00"}', b'{"ts": "2026-01-01T00:00:00Z", "a": "\\u0000"}',
       b'{"ts": "2026-01-01T00:00:00Z", "n": NaN, "x": Infinity, "f": -Infinity}',
       b'{"ts": "2026-01-01T00:00:00Z", "n": 1e400}',
       b'{"ts": "2026-01-01T00:00:00Z", "z": ' + b"[" * 3000 + b"]" * 3000 + b"}",
       b'{"ts": "2026-01-01T00:00:00Z", "a": "big", "n": ' + b"9" * 5000 + b"}",
       b'\xef\xbb\xbf{"ts": "2026-01-01T00:00:00Z"}', b"\x00\x01\x02"]


@st.composite
def records(draw) -> tuple[list[bytes | None], list[dict | None]]:
    """Payloads, and for each the one object it holds (None: several, none, or not as sent)."""
    out: list[bytes | None] = []
    docs: list[dict | None] = []
    for kind in draw(st.lists(st.sampled_from(["obj", "obj", "clean", "raw", "several"]), min_size=1, max_size=10)):
        if kind in ("obj", "clean"):
            doc = draw(obj if kind == "obj" else clean)
            out.append(_dumps(doc))
            docs.append(doc)
        elif kind == "raw":
            out.append(draw(st.sampled_from(RAW)))
            docs.append(None)
        else:
            out.append(b" ".join(_dumps(draw(obj)) for _ in range(draw(st.integers(2, 3)))))
            docs.append(None)
    if draw(st.booleans()):  # whole chunks of well-formed records take pyarrow's vectorized reader
        docs = [draw(clean) for _ in range(draw(st.integers(1, 8)))]
        out = [_dumps(d) for d in docs]
    return out, docs


def make_spec(fmt: str, rollup: bool):
    dims = ["a", {"type": "long", "name": "dl"}, {"type": "long", "name": "t"}]
    input_format = {"json": {"type": "json"},
                    "csv": {"type": "csv", "columns": ["ts", "a", "n", "x", "f", "m", "dl"]},
                    "kafka": {"type": "kafka", "valueFormat": {"type": "json"}, "keyFormat": {"type": "json"}}}[fmt]
    return parse_spec({"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "p", "timestampSpec": {"column": "ts", "format": "auto"},
        "dimensionsSpec": {"dimensions": dims},
        "transformSpec": {"transforms": [{"type": "expression", "name": "t", "expression": "m * 2"}],
                          "filter": {"type": "not", "field": {"type": "selector", "dimension": "a", "value": "drop"}}},
        "metricsSpec": [{"type": "count", "name": "c"}, {"type": "longSum", "name": "ls", "fieldName": "n"},
                        {"type": "longMin", "name": "lmin", "fieldName": "n"},
                        {"type": "doubleSum", "name": "ds", "fieldName": "x"},
                        {"type": "floatMax", "name": "fm", "fieldName": "f"},
                        {"type": "longMax", "name": "mm", "fieldName": "m"}],  # m typed: json takes the fast path
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR", "rollup": rollup}},
        "ioConfig": {"topic": "t", "inputFormat": input_format, "consumerProperties": {"bootstrap.servers": "x:1"}}}})


SPECS = {(fmt, rollup): make_spec(fmt, rollup) for fmt in ("json", "csv", "kafka") for rollup in (True, False)}


def as_csv(payload: bytes | None, doc: dict | None) -> bytes | None:
    if doc is None:
        return payload
    cells = ["" if doc.get(c) is None else str(doc.get(c)) for c in ("ts", "a", "n", "x", "f", "m", "dl")]
    return ",".join('"' + c.replace('"', '""') + '"' for c in cells).encode("utf-8", "surrogatepass")


def long_of(v):
    """The long a value sent as `v` is stored as, or None when it cannot be one (the table of docs/spark-job.md)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        if not v.strip().isascii() or "_" in v:  # Java's parsers read neither `1_000` nor other scripts' digits
            return None
        try:
            v = int(v.strip())
        except ValueError:
            try:
                v = float(v.strip())
            except ValueError:
                return None
    if isinstance(v, float):
        return int(v) if -(2.0 ** 63) <= v < 2.0 ** 63 else None
    if isinstance(v, int):
        return v if -(2 ** 63) <= v < 2 ** 63 else None
    return None


def double_of(v):
    if isinstance(v, (list, dict)) or v is None or isinstance(v, str) and (not v.strip().isascii() or "_" in v):
        return None
    try:
        f = float(v.strip() if isinstance(v, str) else v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def float32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


@pytest.mark.parametrize("fmt,rollup", sorted(SPECS))
@SETTINGS
@given(data=records(), keys=st.lists(st.one_of(st.none(), st.binary(max_size=6), st.just(b'{"k": 1}')), max_size=10))
def test_hostile_records_are_each_accounted_for_and_never_change_a_number(fmt, rollup, data, keys):
    payloads, docs = data
    if fmt == "csv":
        payloads = [as_csv(p, d) for p, d in zip(payloads, docs)]
    n = len(payloads)
    kafka = fmt == "kafka"
    chunk = RecordChunk("t", 1, range(500, 500 + n), payloads,
                        keys=(keys + [None] * n)[:n] if kafka else None,
                        timestamps=[-1] * n if kafka else None,
                        headers=[[("h", b"\xff\x00")]] * n if kafka else None)
    parser = RowParser(SPECS[fmt, rollup], CREATED, keep_thrown_away=True, max_saved_exceptions=1000)

    out = parser.parse(chunk)  # no exception escapes

    s, table, rejections = out.stats, out.table, out.rejections
    by = {o: [r for r in rejections if r.outcome is o] for o in Outcome}
    assert len(by[Outcome.UNPARSEABLE]) == s.unparseable
    assert len(by[Outcome.PROCESSED_WITH_ERROR]) == s.processed_with_error
    assert len(by[Outcome.THROWN_AWAY]) == s.thrown_away
    assert table.num_rows == s.processed + s.processed_with_error
    rows = table.to_pylist()
    kept = {}
    for r in rows:
        kept.setdefault(r[OFFSET], []).append(r)
    rejected = {r.offset for r in rejections if r.outcome is not Outcome.PROCESSED_WITH_ERROR}
    with_error = {r.offset for r in by[Outcome.PROCESSED_WITH_ERROR]}
    assert with_error <= kept.keys()
    for i, payload in enumerate(payloads):
        offset = 500 + i
        # every record is rows, or thrown away / unparseable; a single object exactly one of them
        assert offset in kept or offset in rejected, (payload, out.exceptions)
        if docs[i] is not None:
            assert len(kept.get(offset, [])) + sum(r.offset == offset for r in rejections
                                                   if r.outcome is not Outcome.PROCESSED_WITH_ERROR) == 1
    assert s.processed_bytes == sum(len(p) for p in payloads if p) + sum(len(k) for k in chunk.keys or [] if k)

    # every kept number is the number sent
    for i, doc in enumerate(docs):
        if doc is None or fmt == "csv" or 500 + i not in kept:
            continue
        (row,) = kept[500 + i]
        want_long = long_of(doc.get("n"))
        assert row["__in_long_n"] == want_long
        want_double = double_of(doc.get("x"))
        assert row["__in_double_x"] == want_double
        f = double_of(doc.get("f"))
        assert row["__in_float_f"] == (float32(f) if f is not None and abs(f) <= 3.4028234663852886e38 else None)
        assert row["dl"] == long_of(doc.get("dl"))
        a = doc.get("a")
        if isinstance(a, str):
            assert row["a"] == a
        lost = [c for c, sent, got in (("n", doc.get("n"), row["__in_long_n"]), ("x", doc.get("x"), row["__in_double_x"]),
                                       ("dl", doc.get("dl"), row["dl"])) if sent is not None and got is None]
        if lost:
            assert 500 + i in with_error  # a value that could not be stored is counted

    # the written segment reads back, with no NaN or infinity in it
    buf = io.BytesIO()
    pq.write_table(table, buf)
    back = pq.read_table(io.BytesIO(buf.getvalue()))
    assert back.to_pylist() == rows
    for r in rows:
        assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in r.values())

    # the partial rollup's longSum is exact, past the long range too
    if rollup and table.num_rows:
        withbucket = table.append_column("__bucket", table.column(TIME))
        rollup_ = PartialRollup(["__bucket", "a", "dl", "t"], aggregators(SPECS[fmt, rollup]))
        partial = rollup_.aggregate(withbucket).to_pylist()
        total = sum(v for p in partial if (v := long_sum_value(p, "ls")) is not None)
        assert total == sum(r["__in_long_n"] for r in rows if r["__in_long_n"] is not None)
        assert sum(p["c"] for p in partial) == table.num_rows


def test_the_property_test_sees_the_fast_path_and_every_outcome():
    """The generated records reach what they are meant to: both decoders and all four outcomes."""
    seen = set()
    fast = []

    @settings(max_examples=60, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=records())
    def run(data):
        payloads, _ = data
        parser = RowParser(SPECS["json", True], CREATED, keep_thrown_away=True)
        out = parser.parse(RecordChunk("t", 0, range(len(payloads)), payloads))
        seen.update(r.outcome for r in out.rejections)
        if out.stats.processed:
            seen.add("processed")
        fast.append(json_columns(payloads, parser._fast_schema) is not None
                    if None not in payloads and b"" not in payloads else False)

    run()
    assert seen == set(Outcome) | {"processed"}
    assert any(fast) and not all(fast)
