"""Benchmark: the row parser's records/s per value format, in-process (no Kafka, no Spark), in one run.

The wiki events of `ingest_job_throughput.py` (the same pool, the same example spec and filter), encoded as JSON,
as Avro (`avro_stream`, `schema_inline`; `schema_registry` records decode the same way after their 5-byte
header) and as Protobuf (`protobuf`, an inline descriptor), parsed by `RowParser` in chunks of --chunk records,
as a split parses them. Each round parses every format once, in an order that rotates; the medians over
--repeat rounds are compared (target: Avro >= JSON per record). Every format must give the same table.

    python benchmarks/row_parser_formats.py            # 400,000 records per format, 5 rounds
    python benchmarks/row_parser_formats.py --tiny     # 4,000 records, 1 round: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ingest_job_throughput import FILTER, encode, input_format, wiki_events  # noqa: E402

from ingest_core.core.spec import load_spec, parse_spec  # noqa: E402
from ingest_core.executor.row_parser import RecordChunk, RowParser  # noqa: E402

FORMATS = ("json", "avro", "protobuf")


def parser_for(value_format: str) -> RowParser:
    raw = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml").to_raw()
    raw["spec"]["dataSchema"]["transformSpec"] = {"filter": FILTER}
    raw["spec"]["ioConfig"].update(consumerProperties={"bootstrap.servers": "localhost:9092"},
                                   inputFormat=input_format(value_format))
    return RowParser(parse_spec(raw, f"wikipedia ({value_format})"), datetime.now(timezone.utc))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000, help="records parsed per format and round")
    ap.add_argument("--chunk", type=int, default=20_000, help="records per chunk (a split's batch)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="4,000 records, 1 round: runs once, measures nothing")
    args = ap.parse_args()
    if args.tiny:
        args.records, args.chunk, args.repeat = 4_000, 2_000, 1
    events = wiki_events()
    values = {f: encode(events, f) for f in FORMATS}
    chunks = {f: [RecordChunk("wikipedia", 0, range(i, i + args.chunk),
                              [v[j % len(v)] for j in range(i, i + args.chunk)])
                  for i in range(0, args.records, args.chunk)] for f, v in values.items()}
    parsers = {f: parser_for(f) for f in FORMATS}
    tables = {f: parsers[f].parse(chunks[f][0]).table for f in FORMATS}  # warm-up, and the same rows
    for f in FORMATS:
        if not tables[f].equals(tables["json"]):
            raise AssertionError(f"{f} and JSON records of the same events gave different rows")
    print(f"{args.records:,} records per format in chunks of {args.chunk:,}; {args.repeat} rounds; "
          f"bytes per record: " + ", ".join(f"{f} {sum(map(len, v)) / len(v):.0f}" for f, v in values.items()),
          flush=True)
    rates: dict[str, list[float]] = {f: [] for f in FORMATS}
    for r in range(args.repeat):
        order = FORMATS[r % len(FORMATS):] + FORMATS[:r % len(FORMATS)]
        for f in order:
            started = time.perf_counter()
            for chunk in chunks[f]:
                parsers[f].parse(chunk)
            rates[f].append(args.records / (time.perf_counter() - started))
        print(f"  round {r + 1}: " + ", ".join(f"{f} {rates[f][-1]:,.0f} rec/s" for f in FORMATS), flush=True)
    med = {f: statistics.median(v) for f, v in rates.items()}
    print(f"median of {args.repeat} rounds:")
    for f in FORMATS:
        print(f"  {f:<8} {med[f]:>12,.0f} rec/s  {1e6 / med[f]:6.2f} us/record")
    print(f"  avro / json {med['avro'] / med['json']:.2f}   target >= 1.0")
    print(f"  protobuf / json {med['protobuf'] / med['json']:.2f}", flush=True)


if __name__ == "__main__":
    main()
