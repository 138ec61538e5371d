"""Protobuf schemas for the tests, compiled by the real compiler (protoc, as grpcio-tools bundles it), and the
messages the producers' own generated classes write."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from grpc_tools import protoc

# Druid's documented example (docs/development/extensions-core/protobuf.md), as it is
METRICS_PROTO = """syntax = "proto3";
message Metrics {
  string unit = 1;
  string http_method = 2;
  int32 value = 3;
  string timestamp = 4;
  string http_code = 5;
  string page = 6;
  string metricType = 7;
  string server = 8;
}
"""

# the wiki shape of benchmarks/ingest_job_throughput.py; `optional` keeps a zero (proto3 drops a default value
# otherwise, and Druid reads an absent field as null)
WIKI_PROTO = """syntax = "proto3";
package wiki;
message Other { string x = 1; }
message Edit {
  string time = 1;
  string channel = 2;
  string page = 3;
  string user = 4;
  string namespace = 5;
  optional int32 isRobot = 6;
  optional int64 added = 7;
  optional int64 deleted = 8;
  optional int64 delta = 9;
}
"""

# every kind of field Druid's converter distinguishes
ALL_TYPES_PROTO = """syntax = "proto3";
package kinds;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/field_mask.proto";
message Event {
  enum Kind { KIND_UNSET = 0; EDIT = 1; NEW = 2; }
  message User { string name = 1; int64 edits = 2; }
  string ts = 1;
  string snake_name = 2;
  int32 i32 = 3;
  int64 i64 = 4;
  uint64 u64 = 5;
  sint32 s32 = 6;
  float f32 = 7;
  double f64 = 8;
  bool flag = 9;
  bytes blob = 10;
  Kind kind = 11;
  User user = 12;
  repeated string tags = 13;
  repeated User editors = 14;
  map<string, int32> counts = 15;
  map<int32, string> by_number = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.Duration took = 18;
  google.protobuf.Int64Value maybe = 19;
  google.protobuf.StringValue note = 20;
  google.protobuf.Struct extra = 21;
  google.protobuf.FieldMask mask = 22;
  optional int32 zero = 23;
  oneof choice { string left = 24; int32 right = 25; }
  repeated Kind kinds = 26;
}
"""

# proto2: required fields, which Java's parser (Druid's) insists on
REQUIRED_PROTO = """syntax = "proto2";
package req;
message Reading { required string ts = 1; required int32 level = 2; optional string label = 3 [default = "none"]; }
"""


def compile_proto(folder: Path, name: str, text: str) -> tuple[Path, object]:
    """`protoc --include_imports -o <name>.desc --python_out` of `text`: the descriptor set's path and the
    generated module (the producers' classes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.proto").write_text(text)
    includes = str(Path(protoc.__file__).parent / "_proto")
    desc = folder / f"{name}.desc"
    code = protoc.main(["protoc", f"-I{folder}", f"-I{includes}", "--include_imports", f"-o{desc}",
                        f"--python_out={folder}", f"{name}.proto"])
    assert code == 0, f"protoc failed on {name}.proto"
    sys.path.insert(0, str(folder))
    try:
        sys.modules.pop(f"{name}_pb2", None)
        module = importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(folder))
    return desc, module


def metrics_events(n: int, base_ms: int) -> list[dict]:
    """Druid's example metrics, as `bin/generate-example-metrics` writes them (no value of 0: proto3 would drop
    it, and Druid read it as null)."""
    import time

    out = []
    for i in range(n):
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((base_ms + i * 1000) / 1000)) + "Z"
        out.append({"unit": "milliseconds", "http_method": ["GET", "POST"][i % 2], "value": 10 + i % 90,
                    "timestamp": t, "http_code": ["200", "404"][i % 3 == 0], "page": f"/p{i % 7}",
                    "metricType": "request/latency", "server": f"www{i % 3}.example.com"})
    return out


def varint(n: int) -> bytes:
    """Protobuf's base-128 varint of `n` (a negative number as its 64-bit two's complement), for hand-made wire
    bytes."""
    n &= 2 ** 64 - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
