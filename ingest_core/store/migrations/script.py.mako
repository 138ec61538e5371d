"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
from ingest_core.store.migrations.ops import Json, Timestamp, add_columns, create_tables

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    # Alembic's draft: write tables and columns out here (frozen), through create_tables / add_columns
    ${upgrades if upgrades else "pass"}
