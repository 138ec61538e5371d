"""Dead letters without a broker: the spec section, one chunk's dead letters, the split's file."""

from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.spec import parse_spec
from ingest_core.executor.row_parser import RecordChunk
from ingest_core.handover.dead_letters import (
    DeadLetterWriter,
    RawRecords,
    dead_letter_table,
    file_uri,
)
from ingest_core.handover.report import Outcome, Rejection, SplitReport


def spec(dead_letter=None):
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}},
        "ioConfig": {"topic": "edits", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}
    if dead_letter is not None:
        raw["microbatch"] = {"deadLetter": dead_letter}
    return parse_spec(raw, "wiki.yaml")


def test_the_spec_section_is_off_unless_given_and_its_mistakes_are_named_by_path():
    assert not spec().microbatch.dead_letters_on and spec().microbatch.dead_letter_topic is None
    on = spec({}).microbatch
    assert on.dead_letters_on and not on.dead_letter.include_thrown_away and on.dead_letter_topic is None
    assert not spec({"enabled": False, "topic": "dlq"}).microbatch.dead_letter_topic
    assert spec({"topic": "dlq", "producerProperties": {"linger.ms": 50}}).microbatch.dead_letter_topic == "dlq"

    with pytest.raises(SpecError) as info:
        spec({"topic": " ", "includeThrownaway": True})
    text = str(info.value)
    assert "wiki.yaml" in text and "microbatch.deadLetter.topic: must not be empty" in text
    assert "microbatch.deadLetter.includeThrownaway: unknown field (did you mean 'includeThrownAway'?)" in text
    with pytest.raises(SpecError) as info:
        spec({"topic": "dlq", "producerProperties": {"transactional.id": "x", "sasl.password": "s", "a": [1]}})
    text = str(info.value)
    assert "microbatch.deadLetter.producerProperties.transactional.id: set by the dead-letter producer" in text
    assert "producerProperties.sasl.password: secrets are not accepted here" in text and '"s"' not in text
    assert "producerProperties.a: expected a string, number or boolean" in text
    with pytest.raises(SpecError, match=r"microbatch.deadLetter.producerProperties: only used with a topic"):
        spec({"producerProperties": {"linger.ms": 5}})


def rejections(*items):
    return [Rejection(offset, outcome, message) for offset, outcome, message in items]


def test_one_dead_letter_per_record_with_its_raw_bytes_looked_up_by_offset():
    chunk = RecordChunk("t", 3, [10, 12, 13, 17], [b"a", b"b", b"c", b"d"])  # holes: compaction, markers
    raw = RawRecords([b"k10", None, b"k13", b"k17"], [1000, -1, 1013, None], [None, [("h", b"1")], None, None])
    table = dead_letter_table(chunk, rejections(
        (17, Outcome.THROWN_AWAY, "filtered out"),
        (13, Outcome.PROCESSED_WITH_ERROR, "n: not a number"),
        (13, Outcome.UNPARSEABLE, "row 2: bad time"),  # a record holding two rows: one dead letter, the worst
        (12, Outcome.UNPARSEABLE, "bad json"),
    ), raw)
    rows = table.to_pylist()
    assert [(r["offset"], r["value"], r["key"], r["outcome"]) for r in rows] == [
        (12, b"b", None, "unparseable"), (13, b"c", b"k13", "unparseable"), (17, b"d", b"k17", "thrownAway")]
    assert rows[1]["error"] == "n: not a number; row 2: bad time"
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}] and rows[0]["timestamp"] is None  # -1: none
    assert rows[1]["timestamp"].timestamp() == 1.013 and {r["topic"] for r in rows} == {"t"}
    assert {r["partition"] for r in rows} == {3}

    contiguous = RecordChunk("t", 0, range(100, 103), [b"x", b"y", b"z"])
    table = dead_letter_table(contiguous, rejections((102, Outcome.UNPARSEABLE, "e")),
                              RawRecords([None] * 3, [None] * 3, [None] * 3))
    assert table.column("value").to_pylist() == [b"z"]


def test_a_split_writes_its_file_whole_only_when_it_has_dead_letters(tmp_path):
    attempt = f"file://{tmp_path}/attempt=1"
    assert DeadLetterWriter(file_uri(attempt, 0)).close() is None
    assert not (tmp_path / "attempt=1").exists()

    writer = DeadLetterWriter(file_uri(attempt, 7), row_group_bytes=1)  # a row group per chunk
    chunk = RecordChunk("t", 0, range(0, 4), [b"a", b"b", b"c", b"d"])
    raw = RawRecords([None] * 4, [None] * 4, [None] * 4)
    for offset in (1, 3):
        writer.add(dead_letter_table(chunk, rejections((offset, Outcome.UNPARSEABLE, "e")), raw))
    written = writer.close()
    assert written is not None and written.records == 2 and written.location.endswith("dead-letters/split-00007.parquet")
    files = [p.name for p in (tmp_path / "attempt=1" / "dead-letters").iterdir()]
    assert files == ["split-00007.parquet"]  # no temporary file left
    assert pq.read_table(written.location.removeprefix("file://")).column("offset").to_pylist() == [1, 3]
    assert written.bytes == (tmp_path / "attempt=1" / "dead-letters" / "split-00007.parquet").stat().st_size

    report = SplitReport(7, "t", 0, 0, 4, dead_letters=written)
    assert SplitReport.from_json(report.to_json()).dead_letters == written
    assert "deadLetters" not in SplitReport(7, "t", 0, 0, 4).to_json()


def test_thrown_away_records_become_dead_letters_only_when_the_spec_asks():
    """The split's parser lists the rows the filter threw away (and tombstones) when includeThrownAway is set:
    the wiring of `kafka_source` and the row parser's `keep_thrown_away`, end to end without a broker."""
    from ingest_core.core.spec import parse_spec
    from ingest_core.spark.kafka_source import ReadJob, split_parser

    def dead_letters(include: bool):
        raw = spec({"includeThrownAway": include}).to_raw()
        raw["spec"]["dataSchema"]["transformSpec"] = {"filter": {"type": "selector", "dimension": "a", "value": "x"}}
        job = ReadJob(parse_spec(raw), datetime(2026, 1, 1, tzinfo=timezone.utc), (), "file:///unused")
        parser = split_parser(ReadJob.loads(job.dumps()))  # as the executors get it
        chunk = RecordChunk("t", 0, range(5, 9), [b'{"ts": "2026-01-01T00:00:00Z", "a": "x"}',
                                                   b'{"ts": "2026-01-01T00:00:00Z", "a": "y"}', None, b"{oops"])
        table = dead_letter_table(chunk, parser.parse(chunk).rejections, RawRecords([None] * 4, [None] * 4, [None] * 4))
        return [(r["offset"], r["outcome"]) for r in table.to_pylist()]

    assert dead_letters(False) == [(8, "unparseable")]
    assert dead_letters(True) == [(6, "thrownAway"), (7, "thrownAway"), (8, "unparseable")]
