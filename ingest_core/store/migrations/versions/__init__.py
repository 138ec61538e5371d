"""The metadata store's schema revisions, oldest first (`../revisions.py` runs them). 0001-0008 are the
hand-rolled versions 1-8 of the releases before Alembic, step for step."""
