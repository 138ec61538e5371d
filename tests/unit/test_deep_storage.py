"""Deep-storage locations never come from unvalidated text: a run id is whatever the triggering user typed
(`airflow dags trigger --run-id`), so it is encoded into one path segment, and a datasource name that could
leave the base is refused."""

from __future__ import annotations

import posixpath

import pytest

from ingest_core.handover import deep_storage

BASE = "file:///deep"


@pytest.mark.parametrize("run_id", ["..", ".", "../../etc", "a/../../b", "/abs", "x/y", "~", "", "%2e%2e", "..\\..",
                                    "é", "\x00", "scheduled__2026-11-22T10:00:00+00:00"])
def test_any_run_id_stays_one_folder_below_the_datasource(run_id):
    uri = deep_storage.run_uri(BASE, "wiki", run_id)
    folder = uri[len("file://"):]
    assert posixpath.dirname(folder) == "/deep/wiki"
    segment = posixpath.basename(folder)
    assert segment not in ("", ".", "..") and "/" not in segment and not segment.startswith(".")


def test_distinct_run_ids_get_distinct_folders_and_ordinary_ids_stay_readable():
    ids = ["manual__2026:01", "manual__2026_01", "manual__2026~3a01", "..", "_.", "~2e.", "a.b", "a_b"]
    assert len({deep_storage.safe_name(i) for i in ids}) == len(ids)
    assert deep_storage.safe_name("manual__2026-11-22T10:00:00+00:00") == "manual__2026-11-22T10~3a00~3a00~2b00~3a00"
    assert deep_storage.safe_name("backfill_1.2") == "backfill_1.2"


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../x", ""])
def test_a_datasource_name_that_would_leave_the_base_is_refused(name):
    with pytest.raises(ValueError, match="datasource name"):
        deep_storage.run_uri(BASE, name, "r1")
