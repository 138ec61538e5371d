"""Druid's metrics from a status report (`service.metrics`, pure): the lag figures agree with the report's for any
offsets, an unknown lag sends nothing, and names and tags stay within what Airflow's StatsD accepts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.core.offsets import TopicPartition
from ingest_core.service.metrics import druid_metrics, statsd_tags, untagged_name
from ingest_core.service.status import RunSummary, StatusReport
from ingest_core.store.records import PublishedFigures

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
AIRFLOW_NAME = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/")


def report(committed, latest, runs=(), name="wiki", stream="wiki") -> StatusReport:
    return StatusReport(name, stream, "RUNNING", "RUNNING", True, False, False, committed, latest, None,
                        recent_runs=list(runs))


offsets = st.dictionaries(st.integers(0, 50).map(lambda p: TopicPartition("wiki", p)), st.integers(0, 10**12),
                          max_size=20)


@given(offsets, offsets)
def test_the_lag_metrics_are_the_reports_lag(committed, latest):
    r = report(committed, latest)
    sent = {(m.name, m.tag_dict.get("partition")): m.value for m in druid_metrics(r, None, T0)}
    assert sent[("ingest/kafka/lag", None)] == r.aggregate_lag
    assert {p: v for (n, p), v in sent.items() if n == "ingest/kafka/partitionLag"} == \
        {str(tp.partition): v for tp, v in r.lag.items()}
    if r.lag:
        assert sent[("ingest/kafka/maxLag", None)] == max(r.lag.values())
        assert sent[("ingest/kafka/avgLag", None)] == r.aggregate_lag / len(r.lag)


def test_an_unknown_lag_is_not_sent_as_zero():
    assert [m.name for m in druid_metrics(report({TopicPartition("wiki", 0): 5}, None), None, T0)] == []


def test_a_runs_figures_and_the_age_of_the_last_publish():
    run = RunSummary("r1", "PUBLISHED", 10, T0, T0 + timedelta(seconds=4, microseconds=999_999),
                     {"processed": 9, "unparseable": 1}, None, published=PublishedFigures(10, 7, 2, 100))
    sent = {m.name: m.value for m in druid_metrics(report({}, {}, [run]), "r1", T0 + timedelta(seconds=10))}
    assert sent["ingest/events/processed"] == 9 and sent["ingest/events/unparseable"] == 1
    assert sent["ingest/events/thrownAway"] == 0
    assert sent["ingest/rows/output"] == 7 and sent["ingest/segments/count"] == 2
    assert sent["task/run/time"] == 4999  # the printed times' difference: milliseconds, cut
    assert sent["ingest/publish/age"] == 5001
    # another run's end: its figures are not this run's
    assert "task/run/time" not in {m.name for m in druid_metrics(report({}, {}, [run]), "r2", T0)}


@settings(max_examples=40)
@given(st.text(min_size=1, max_size=30))
def test_any_datasource_name_gives_a_name_and_tags_airflows_statsd_accepts(name):
    r = report({}, {TopicPartition("t", 1): 3}, name=name, stream=name)
    for m in druid_metrics(r, None, T0):
        assert set(untagged_name(m)) <= AIRFLOW_NAME
        assert all(set(v) <= AIRFLOW_NAME for v in statsd_tags(m).values())
    lag = next(m for m in druid_metrics(r, None, T0) if m.name == "ingest/kafka/partitionLag")
    assert untagged_name(lag).startswith("ingest/kafka/partitionLag.") and untagged_name(lag).endswith(".1")
    assert untagged_name(lag).count(".") == 2  # a `.` in the name does not add a level
