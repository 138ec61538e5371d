"""Alembic's environment for the metadata store, online only: the connection comes from `revisions.upgrade`
(the caller's transaction), or from `sqlalchemy.url` for `alembic.command.revision(revisions.config(url=...))`."""

from alembic import context

from ingest_core.store.engines import make_engine
from ingest_core.store.migrations.revisions import CONTEXT_OPTIONS
from ingest_core.store.schema import meta

if context.is_offline_mode():
    raise SystemExit("the metadata store's revisions run online only: some look at the tables before changing them")

config = context.config
applied = config.attributes.get("on_version_apply")
options = dict(CONTEXT_OPTIONS, target_metadata=meta,
               on_version_apply=(lambda ctx, step, heads, run_args: applied(step)) if applied else ())


def run(connection) -> None:
    context.configure(connection=connection, **options)
    with context.begin_transaction():
        context.run_migrations()


if config.attributes.get("connection") is not None:
    run(config.attributes["connection"])
else:
    engine = make_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as connection:
            run(connection)
    finally:
        engine.dispose()
