"""The metadata store's schema migrations, under Alembic: `revisions` (which revision a store is at, the upgrade,
the check against the models), `legacy_marker` (the hand-rolled version of the releases before), `ops` (what the
revision scripts share), `env.py` (Alembic's environment) and `versions/` (one script per revision)."""
