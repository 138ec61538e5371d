"""The suite's rule that every metadata store a test opens is closed (tests/conftest.py's `stores_closed`, on
for every test) is able to fail, and lets closed and dropped stores pass."""

import pytest
from conftest import stores_closed

from ingest_core.store.metadata import MetadataStore


def test_a_store_kept_open_past_the_end_fails_the_check_and_is_closed_by_it(tmp_path):
    kept = []
    with pytest.raises(AssertionError, match="left open by the test") as info:
        with stores_closed():
            kept.append(MetadataStore(f"sqlite:///{tmp_path / 'kept.db'}"))
            kept[0].upgrade()
            assert kept[0].engine.pool.checkedin() == 1
    assert "test_store_closing.py:" in str(info.value)  # where it was opened
    assert kept[0].engine.pool.checkedin() == 0


def test_stores_closed_or_dropped_and_shared_ones_pass(tmp_path):
    url = f"sqlite:///{tmp_path / 'md.db'}"
    with stores_closed():
        with MetadataStore(url) as store:
            store.upgrade()
        opened = MetadataStore(url)
        assert opened.datasources.all() == []
        opened.dispose()
        assert MetadataStore(url).datasources.all() == []  # dropped at once: closed with its engine
        assert MetadataStore.shared(url).datasources.all() == []  # the process's engine, disposed at exit
