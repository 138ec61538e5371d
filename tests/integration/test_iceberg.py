"""The Iceberg table of a datasource (pyiceberg's SQL catalog in the metadata database, SQLite and PostgreSQL)
follows the published segments exactly once: real Parquet segments, published by the real publish."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
import sqlalchemy as sa
from helpers import make_spec, publish_segments

from ingest_core.core.offsets import TopicPartition
from ingest_core.store import iceberg
from ingest_core.store.reader import DatasourceReader
from ingest_core.store.schema import segments

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PARTS = [TopicPartition("edits", p) for p in range(2)]
TIME = pa.timestamp("ms", tz="UTC")


def rows(n: int, start: int = 0, hour: datetime = T0, **extra) -> pa.Table:
    return pa.table({"__time": pa.array([hour + timedelta(minutes=i % 60) for i in range(start, start + n)], TIME),
                     "page": pa.array([f"p{i % 3}" for i in range(start, start + n)]),
                     "added": pa.array(range(start, start + n), pa.int64()), **extra})


@pytest.fixture
def spec(tmp_path):
    return make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=2,
                     microbatch={"iceberg": {}, "deepStorage": {"uri": (tmp_path / "deep").as_uri()}})


def table_rows(store, spec) -> list[dict]:
    cat = iceberg.catalog(store)
    try:
        arrow = cat.load_table(iceberg.table_identifier(spec)).scan().to_arrow()
    finally:
        cat.engine.dispose()
    return sorted(arrow.to_pylist(), key=lambda r: (r["__time"], r["page"], r["added"]))


def reader_rows(store) -> list[dict]:
    return sorted(DatasourceReader(store, "wiki").to_arrow().to_pylist(), key=lambda r: (r["__time"], r["page"],
                                                                                          r["added"]))


def snapshot(store, spec):
    cat = iceberg.catalog(store)
    try:
        table = cat.load_table(iceberg.table_identifier(spec))
        return table, table.current_snapshot()
    finally:
        cat.engine.dispose()


def test_the_table_follows_every_publish_once_with_its_offsets_in_the_summary(store, spec, tmp_path):
    assert iceberg.sync(store, spec).snapshot_id is None  # nothing published: no table yet
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS}, [rows(10), rows(10, 10)])
    first = iceberg.sync(store, spec)
    assert (first.table, first.added, first.removed) == ("ingest.wiki", 2, 0)
    assert table_rows(store, spec) == reader_rows(store) and len(reader_rows(store)) == 20
    table, snap = snapshot(store, spec)
    summary = snap.summary
    assert summary[iceberg.COMMIT_VERSION] == str(store.datasources.get("wiki")["commit_version"])
    assert json.loads(summary[iceberg.COMMITTED_OFFSETS]) == {"edits": {"0": 10, "1": 10}}
    assert [f.name for f in table.spec().fields] == ["__time_hour"]  # the spec's HOUR segments, one per partition
    assert table.location().endswith("/deep/wiki/.iceberg/wiki")
    # level: a second sync commits nothing
    again = iceberg.sync(store, spec)
    assert not again.changed and again.snapshot_id == first.snapshot_id

    # two publishes whose syncs never ran (the report task died): one sync brings the table level, each file once;
    # a column the later segments add reads as null in the earlier ones
    publish_segments(store, tmp_path, "r2", {tp: 15 for tp in PARTS},
                     [rows(5, 20, user=pa.array(["ann"] * 5)), rows(5, 25, user=pa.array(["bob"] * 5))])
    publish_segments(store, tmp_path, "r3", {tp: 16 for tp in PARTS},
                     [rows(1, 30, hour=T0 + timedelta(hours=1)), rows(1, 31, hour=T0 + timedelta(hours=1))])
    level = iceberg.sync(store, spec)
    assert (level.added, level.removed) == (4, 0)
    got = table_rows(store, spec)
    assert got == reader_rows(store) and len(got) == 32
    assert sum(1 for r in got if r["user"] is not None) == 10
    _, snap = snapshot(store, spec)
    assert json.loads(snap.summary[iceberg.COMMITTED_OFFSETS]) == {"edits": {"0": 16, "1": 16}}


def test_a_segment_no_longer_visible_leaves_the_table(store, spec, tmp_path):
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS}, [rows(10), rows(10, 10)])
    iceberg.sync(store, spec)
    gone = store.segment_records.of("wiki")[0]
    with store.session() as conn:  # what compaction (a newer version) or a kill does to a segment
        conn.execute(segments.update().where(segments.c.id == gone.id).values(used=False))
    dropped = iceberg.sync(store, spec)
    assert (dropped.added, dropped.removed) == (0, 1)
    assert table_rows(store, spec) == reader_rows(store) and len(reader_rows(store)) == 10
    _, snap = snapshot(store, spec)
    assert snap.summary.operation.value == "overwrite" and snap.summary[iceberg.VISIBLE_SEGMENTS] == "1"


def test_syncs_at_once_add_each_file_once(store, spec, tmp_path):
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS}, [rows(10), rows(10, 10)])
    publish_segments(store, tmp_path, "r2", {tp: 20 for tp in PARTS}, [rows(10, 20), rows(10, 30)])
    results, errors = [], []  # the syncs race to create the table, then to commit its files

    def one():
        try:
            results.append(iceberg.sync(store, spec))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(r.added for r in results) == 4  # one sync added them; the others found the table level
    got = table_rows(store, spec)
    assert got == reader_rows(store) and len(got) == 40
    table, _ = snapshot(store, spec)
    assert [f.name for f in table.spec().fields] == ["__time_hour"] and len(table.snapshots()) == 1


def test_the_catalog_lives_in_the_metadata_database(store, spec, tmp_path):
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS}, [rows(10), rows(10, 10)])
    iceberg.sync(store, spec)
    with store.session() as conn:
        (location,) = conn.execute(sa.text("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = "
                                           "'ingest' AND table_namespace = 'ingest' AND table_name = 'wiki'")).one()
    assert "/deep/wiki/.iceberg/wiki/metadata/" in location
