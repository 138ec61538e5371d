"""What the revision scripts share: the column types they were written with, and schema steps that are idempotent.

The hand-rolled upgrades before Alembic created a new store with that release's tables and then ran every step,
so each step found its work done and skipped it. The revisions keep that: a table is created if missing, a column
added if missing, so a store whose old marker lags its tables (a crash between DDL and marker on a database
without transactional DDL) upgrades all the same.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

# Frozen here, not taken from `schema`: a revision must build what it built when it was written.
Json = sa.JSON().with_variant(JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)


def create_tables(*tables: sa.Table) -> None:
    """Create each table (and its indexes) unless it is there."""
    for table in tables:
        table.create(op.get_bind(), checkfirst=True)


def add_columns(table: str, *columns: sa.Column) -> None:
    """Add each column the table does not have yet (nullable ones: the rows of before hold NULL)."""
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}
    for column in columns:
        if column.name not in present:
            op.add_column(table, column)
