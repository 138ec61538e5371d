"""The `protobuf` format's columnar path (`executor/formats/protobuf_columns.py`) gives the rows the per-record path gives
(Druid's converter): for generated messages of a rich flat type, through the inline and the schema-registry
decoders; and a chunk it does not fit (hostile bytes, a field twice, a column of a nested field, ...) decodes
record by record, which names the records at fault."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protobuf_fixtures import compile_proto, varint

from ingest_core.core.spec import parse_spec
from ingest_core.executor.formats.protobuf import Converter, _RegistrySchema
from ingest_core.executor.formats.protobuf_descriptors import descriptor_set, pool_of
from ingest_core.executor.row_parser import RecordChunk, RowParser
from ingest_core.executor.formats.schema_registry import RegistryConfig, client_for

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

FLAT_PROTO = """syntax = "proto3";
package cols;
message Other { string x = 1; }
message Flat {
  enum Color { COLOR_UNSET = 0; RED = 1; GREEN = 2; BLUE = -3; }
  message Sub { string x = 1; int32 y = 2; }
  string ts = 1;
  string name = 2;
  optional string label = 3;
  int32 i32 = 4;
  int64 i64 = 5;
  uint32 u32 = 6;
  uint64 u64 = 7;
  sint32 s32 = 8;
  sint64 s64 = 9;
  fixed32 f32x = 10;
  fixed64 f64x = 11;
  sfixed32 sf32 = 12;
  sfixed64 sf64 = 13;
  float fl = 14;
  double db = 15;
  bool flag = 16;
  bytes blob = 17;
  Color color = 18;
  optional int64 opt_long = 19;
  optional float opt_float = 20;
  oneof pick { string left = 21; int64 right = 22; }
  Sub sub = 23;
  repeated int32 nums = 24;
  map<string, string> attrs = 25;
  int64 big_number = 300;
}
"""

LEGACY_PROTO = """syntax = "proto2";
package legacy;
message Reading {
  enum Kind { A = 1; B = 2; }
  required string ts = 1;
  optional int32 level = 2;
  optional string note = 3 [default = "x"];
  optional Kind kind = 4;
}
"""

REGISTRY = "http://127.0.0.1:9"  # nothing answers: the registry decoder's schema is put in place by the test


@pytest.fixture(scope="module")
def protos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cols")
    client_for(RegistryConfig.of(url=REGISTRY)).retry_delays = (0.01,)
    return {name: compile_proto(folder, name, text) for name, text in
            [("flat", FLAT_PROTO), ("legacy", LEGACY_PROTO)]}


DIMENSIONS = ("name", "label", "color", "blob", "f32x", "optFloat", "left", "nowhere", "renamed", "deep", "subX",
              "noPath", {"type": "long", "name": "subY"},
              {"type": "long", "name": "i32"}, {"type": "long", "name": "s32"}, {"type": "long", "name": "u32"},
              {"type": "double", "name": "db"}, {"type": "float", "name": "fl"})
SUMS = ("i64", "s64", "u64", "f64x", "sf32", "sf64", "optLong", "right", "bigNumber")
FLATTEN = {"fields": [{"type": "root", "name": "renamed", "expr": "i32"},
                      {"type": "path", "name": "deep", "expr": "$.name"},
                      {"type": "path", "name": "subX", "expr": "$.sub.x"},
                      {"type": "path", "name": "subY", "expr": "$['sub']['y']"},
                      {"type": "path", "name": "noPath", "expr": "$.nothing.x"}]}

_parsers: dict = {}


def parsers(fmt: dict, dimensions=DIMENSIONS, flatten: dict | None = FLATTEN) -> tuple[RowParser, RowParser]:
    """(columnar, per-record) parsers of one spec; kept per spec (a parser keeps no state between chunks)."""
    key = repr((fmt, dimensions, flatten))
    if key not in _parsers:
        spec = parse_spec({"type": "kafka", "spec": {
            "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "ts", "format": "iso"},
                           "dimensionsSpec": {"dimensions": list(dimensions)},
                           "metricsSpec": [{"type": "longSum", "name": f"sum_{f}", "fieldName": f} for f in SUMS]
                           + [{"type": "doubleSum", "name": f"sum_{f}", "fieldName": f} for f in ("fl", "optFloat")],
                           "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE",
                                               "rollup": False}},
            "ioConfig": {"topic": "t", "consumerProperties": {"bootstrap.servers": "localhost:9092"},
                         "inputFormat": {**fmt, **({"flattenSpec": flatten} if flatten else {})}},
            "tuningConfig": {"type": "kafka"}}}, "<test>")
        columnar, per_record = RowParser(spec, CREATED, max_saved_exceptions=1000), RowParser(
            spec, CREATED, max_saved_exceptions=1000)
        per_record._columnar = None
        _parsers[key] = columnar, per_record
    return _parsers[key]


def inline(protos, message: str = "cols.Flat", name: str = "flat") -> dict:
    desc, _ = protos[name]
    return {"type": "protobuf", "protoBytesDecoder": {
        "type": "inline", "descriptorString": base64.b64encode(desc.read_bytes()).decode(),
        "protoMessageType": message}}


def registry_parsers(protos, **kw) -> tuple[RowParser, RowParser]:
    """Parsers of the schema-registry decoder, schema id 7 being the flat file (Flat is its message index 1)."""
    columnar, per_record = parsers({"type": "protobuf", "protoBytesDecoder": {"type": "schema_registry",
                                                                             "url": REGISTRY}}, **kw)
    desc, _ = protos["flat"]
    for parser in (columnar, per_record):
        files = descriptor_set(desc.read_bytes(), "flat")
        pool = pool_of(files)
        parser.decoder._registry._schemas[7] = _RegistrySchema(pool, pool.FindFileByName("flat.proto"),
                                                               Converter(pool))
    return columnar, per_record


def framed(body: bytes, schema_id: int = 7, indexes: bytes = b"\x02\x02") -> bytes:
    """Confluent's wire format: magic byte, schema id, message indexes ([1]: count 1, index 1, zigzag)."""
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + body


texts = st.text(max_size=6)
ints32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
ints64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
flat_values = st.fixed_dictionaries({
    "ts": st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:30:00.5Z", ""]),
    "name": texts, "label": st.none() | texts, "i32": ints32, "i64": ints64,
    "u32": st.integers(0, 2 ** 32 - 1), "u64": st.integers(0, 2 ** 63 - 1), "s32": ints32, "s64": ints64,
    "f32x": st.integers(0, 2 ** 32 - 1), "f64x": st.integers(0, 2 ** 63 - 1), "sf32": ints32, "sf64": ints64,
    "fl": floats32, "db": st.floats(allow_nan=False, allow_infinity=False), "flag": st.booleans(),
    "blob": st.binary(max_size=5), "color": st.sampled_from([0, 1, 2, -3]),
    "opt_long": st.none() | ints64, "opt_float": st.none() | floats32,
    "left": st.none() | texts, "right": st.none() | ints64, "big_number": ints64,
    "sub": st.none() | st.tuples(texts, ints32), "nums": st.lists(ints32, max_size=3),
    "attrs": st.dictionaries(texts, texts, max_size=2)})


def encode(protos, values: dict) -> bytes:
    _, module = protos["flat"]
    kw = {k: v for k, v in values.items() if v is not None and k not in ("sub", "right")}
    if kw.get("left") is None and values["right"] is not None:
        kw["right"] = values["right"]  # a oneof: one member at most
    msg = module.Flat(**kw)
    if values["sub"] is not None:
        msg.sub.x, msg.sub.y = values["sub"]
    return msg.SerializeToString()


def same_rows(columnar: RowParser, per_record: RowParser, values: list[bytes]):
    chunk = RecordChunk("t", 0, range(len(values)), values)
    a, b = columnar.parse(chunk), per_record.parse(chunk)
    assert a.table.equals(b.table), (a.table.to_pylist(), b.table.to_pylist())
    assert a.stats == b.stats
    assert [(e.offset, e.message) for e in a.exceptions] == [(e.offset, e.message) for e in b.exceptions]
    return a


@SETTINGS
@given(records=st.lists(flat_values, min_size=1, max_size=10))
def test_the_columnar_path_gives_the_per_record_paths_rows(protos, records):
    values = [encode(protos, r) for r in records]
    columnar, per_record = parsers(inline(protos))
    assert columnar.decoder.columns(values, columnar._columnar) is not None  # the columnar path was taken
    got = same_rows(columnar, per_record, values)
    assert got.stats.processed + got.stats.unparseable + got.stats.thrown_away == len(records)  # b"": all defaults
    # the schema registry's wire format: the same rows (an empty message is a row there, with no time)
    columnar, per_record = registry_parsers(protos)
    framed_values = [framed(v) for v in values]
    assert columnar.decoder.columns(framed_values, columnar._columnar) is not None
    in_registry = same_rows(columnar, per_record, framed_values)
    assert b"" in values or in_registry.table.equals(got.table)


def test_values_read_as_druids_converter_gives_them(protos):
    _, module = protos["flat"]
    msg = module.Flat(ts="2026-01-01T00:00:00Z", name="é", label="", i32=-5, s32=-3, u32=2 ** 32 - 1,
                      fl=0.1, db=-0.0, blob=b"\x00\xff", color=-3, opt_float=0.0, left="", f32x=7)
    empty = module.Flat(ts="2026-01-01T00:00:00Z", i32=0, name="", color=0)  # proto3 defaults: absent
    columnar, _ = parsers(inline(protos))
    cols = columnar.decoder.columns([msg.SerializeToString(), empty.SerializeToString()], columnar._columnar)
    got = {k: v.to_pylist() for k, v in cols.items()}
    assert got["name"] == ["é", None] and got["label"] == ["", None] and got["left"] == ["", None]
    assert got["i32"] == got["renamed"] == [-5, None] and got["s32"] == [-3, None]
    assert got["u32"] == [2 ** 32 - 1, None] and got["f32x"] == [7, None]
    assert got["fl"] == [0.1, None] and got["optFloat"] == [0.0, None]  # float32 as its shortest decimal
    assert got["blob"] == ["AP8=", None] and got["color"] == ["BLUE", None] and got["nowhere"] == [None, None]
    assert got["deep"] == got["name"] and got["subX"] == got["subY"] == got["noPath"] == [None, None]
    assert str(got["db"][0]) == "-0.0"  # a double's -0.0 is not its default (protobuf compares bits)


GOOD = b"\x0a\x142026-01-01T00:00:00Z"  # ts
MISFITS = {
    "a field twice (the last wins)": GOOD + b"\x20\x01\x20\x02",
    "a known field with another wire type": GOOD + b"\x25\x01\x00\x00\x00",
    "an enum number the schema does not name": GOOD + b"\x90\x01\x07",
    "two members of a oneof": GOOD + b"\xaa\x01\x01a\xb0\x01\x05",
    "text that is not UTF-8": GOOD + b"\x12\x02\xc3\x28",
    "a uint64 past int64": GOOD + b"\x38" + varint(2 ** 64 - 1),
    "a group": GOOD + b"\xfb\x01\xfc\x01",
    "wire type 7": GOOD + b"\x27",
    "field number 0": GOOD + b"\x00\x01",
    "a truncated value": GOOD + b"\x12\x05ab",
    "an 11-byte varint": GOOD + b"\x20" + b"\xff" * 10 + b"\x01",
    "a nested message that does not parse": GOOD + b"\xba\x01\x02\x0a\x05",
    "a nested string that is not UTF-8": GOOD + b"\xba\x01\x03\x0a\x01\xff",
    "a nested message twice (merged)": GOOD + b"\xba\x01\x03\x0a\x01a" + b"\xba\x01\x02\x10\x01",
    "a nested message with another wire type": GOOD + b"\xb8\x01\x05",
    "a field twice in a nested message": GOOD + b"\xba\x01\x04\x10\x01\x10\x02",
}


@pytest.mark.parametrize("why", sorted(MISFITS))
def test_a_chunk_the_columnar_path_does_not_fit_decodes_record_by_record(protos, why):
    good = GOOD + b"\x12\x03abc"
    values = [good, MISFITS[why], good]
    for fmt_values, (columnar, per_record) in [(values, parsers(inline(protos))),
                                               ([framed(v) for v in values], registry_parsers(protos))]:
        assert columnar.decoder.columns(fmt_values, columnar._columnar) is None
        same_rows(columnar, per_record, fmt_values)
    columnar, _ = parsers(inline(protos))
    assert columnar.decoder.columns([good, good], columnar._columnar) is not None


def test_unknown_fields_are_skipped_as_upb_skips_them(protos):
    unknown = GOOD + b"\xc8\x3e\x05" + b"\xd1\x3e" + bytes(8) + b"\xda\x3e\x02hi" + b"\xe5\x3e" + bytes(4)
    columnar, per_record = parsers(inline(protos))
    assert columnar.decoder.columns([unknown, GOOD], columnar._columnar) is not None
    same_rows(columnar, per_record, [unknown, GOOD])


@pytest.mark.parametrize("dimensions,flatten", [
    (("flag",), None),  # booleans: the per-record path keeps Python booleans
    (("sub",), None),  # a nested message: its JSON text
    (("nums", "attrs"), None),
    (("x",), {"fields": [{"type": "path", "name": "x", "expr": "$.name.x"}]}),  # a path into text
    (("a",), {"fields": [{"type": "path", "name": "a", "expr": "$.attrs.a"}]}),  # into a map
    (("n0",), {"fields": [{"type": "path", "name": "n0", "expr": "$.nums[0]"}]})])
def test_columns_of_fields_it_does_not_read_decode_record_by_record(protos, dimensions, flatten):
    _, module = protos["flat"]
    msg = module.Flat(ts="2026-01-01T00:00:00Z", flag=True, nums=[1, 2], attrs={"a": "b"})
    msg.sub.x = "in"
    values = [msg.SerializeToString()] * 2
    columnar, per_record = parsers(inline(protos), dimensions, flatten)
    assert columnar.decoder.columns(values, columnar._columnar) is None
    same_rows(columnar, per_record, values)


def test_flatten_paths_read_singular_nested_messages(protos):
    _, module = protos["flat"]
    with_sub = module.Flat(ts="2026-01-01T00:00:00Z", name="a")
    with_sub.sub.x, with_sub.sub.y = "in", -4
    empty_sub = module.Flat(ts="2026-01-01T00:00:00Z")
    empty_sub.sub.SetInParent()  # present and empty: the converter's {} has no `x`
    values = [with_sub.SerializeToString(), module.Flat(ts="2026-01-01T00:00:00Z").SerializeToString(),
              empty_sub.SerializeToString()]
    columnar, per_record = parsers(inline(protos))
    cols = columnar.decoder.columns(values, columnar._columnar)
    assert cols["subX"].to_pylist() == ["in", None, None] and cols["subY"].to_pylist() == [-4, None, None]
    assert cols["noPath"].to_pylist() == [None] * 3
    same_rows(columnar, per_record, values)


def test_proto2_presence_required_fields_and_closed_enums(protos):
    _, legacy = protos["legacy"]
    fmt = inline(protos, "legacy.Reading", "legacy")
    columnar, per_record = parsers(fmt, ("level", "note", "kind"), None)
    ok = [legacy.Reading(ts="2026-01-01T00:00:00Z", level=0, note="").SerializeToString(),
          legacy.Reading(ts="2026-01-01T00:00:00Z", kind=2).SerializeToString()]
    cols = columnar.decoder.columns(ok, columnar._columnar)
    assert {k: cols[k].to_pylist() for k in ("level", "note", "kind", "ts")} == {  # proto2: a value set is present, even a default
        "level": [0, None], "note": ["", None], "kind": [None, "B"], "ts": ["2026-01-01T00:00:00Z"] * 2}
    same_rows(columnar, per_record, ok)
    missing = legacy.Reading(level=1).SerializePartialToString()  # no ts: Java's parser refuses it
    assert columnar.decoder.columns(ok + [missing], columnar._columnar) is None
    got = same_rows(columnar, per_record, ok + [missing])
    assert [e.offset for e in got.exceptions] == [2] and "lacks required fields: ts" in got.exceptions[0].message


def test_records_of_other_headers_or_unknown_schemas_decode_record_by_record(protos):
    columnar, per_record = registry_parsers(protos)
    good = GOOD + b"\x12\x01a"
    other = framed(b"\x0a\x01k", indexes=b"\x00")  # message index [0]: `Other`
    mixed = [framed(good), other, framed(good, schema_id=8)]  # schema id 8: the registry does not answer
    assert columnar.decoder.columns(mixed, columnar._columnar) is None
    got = same_rows(columnar, per_record, mixed)
    assert [e.offset for e in got.exceptions] == [1, 2]  # Other has no `ts`; schema 8 is not there


SAMPLE = GOOD + b"\x20\x05\x12\x02hi"
hostile = st.one_of(
    st.binary(min_size=1, max_size=40),
    st.sampled_from(sorted(MISFITS.values())),
    st.builds(lambda cut: SAMPLE[:cut], st.integers(1, len(SAMPLE) - 1)),  # truncated
    st.builds(lambda at, byte: SAMPLE[:at] + bytes([byte]) + SAMPLE[at + 1:], st.integers(0, len(SAMPLE) - 1),
              st.integers(0, 255)),
    st.builds(lambda tail: SAMPLE + tail, st.binary(min_size=1, max_size=6)))


@SETTINGS
@given(values=st.lists(hostile, min_size=1, max_size=8), records=st.lists(flat_values, max_size=3))
def test_hostile_chunks_fall_back_and_name_the_bad_records(protos, values, records):
    values = values + [encode(protos, r) for r in records]
    columnar, per_record = parsers(inline(protos))
    bad = set()
    for i, v in enumerate(values):
        try:
            per_record.decoder.rows(v)
        except ValueError:
            bad.add(i)
    got = same_rows(columnar, per_record, values)
    assert bad <= {e.offset for e in got.exceptions}
    s = got.stats
    assert s.processed + s.processed_with_error + s.unparseable + s.thrown_away == len(values)


def test_float_fields_read_as_the_shortest_decimal_of_the_float32(protos):
    _, module = protos["flat"]
    floats = [0.1, 1 / 3, 3.4028234663852886e38, 1e-45, -2.5, 16777217.0, 7e-39]
    values = [module.Flat(ts="2026-01-01T00:00:00Z", fl=f).SerializeToString() for f in floats]
    columnar, per_record = parsers(inline(protos))
    got = columnar.decoder.columns(values, columnar._columnar)["fl"].to_pylist()
    assert got == [per_record.decoder.rows(v)[0]["fl"] for v in values]
    assert got[:2] == [0.1, 0.33333334] and got[2] == 3.4028235e38
