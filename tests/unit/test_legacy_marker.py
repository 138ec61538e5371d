"""The hand-rolled version of a store of before Alembic, from its marker rows (pure)."""

from hypothesis import given
from hypothesis import strategies as st

from ingest_core.store.migrations.legacy_marker import revision_of, unbroken_run


@given(st.sets(st.integers(min_value=-3, max_value=12)))
def test_a_store_is_at_the_last_step_of_its_unbroken_run_from_1(done):
    """Markers {1, 2, 3, 4, 6} (a branch that ran 6 before 5 existed) put the store at 4: 5's step runs, and 6's
    finds its work done. Nothing below 1 or after a gap counts."""
    version = unbroken_run(done)
    assert set(range(1, version + 1)) <= done and version + 1 not in done


def test_the_examples():
    assert [unbroken_run(d) for d in (set(), {2, 3}, {1, 2, 3, 4, 6}, set(range(1, 9)))] == [0, 0, 4, 8]
    assert revision_of(8) == "0008"
