"""The metadata store (SQLAlchemy: PostgreSQL in production, SQLite embedded), the exactly-once publish, the
reader of a datasource's visible segments and the cleanup of job output nothing was published from. SQL over
those segments is `ingest_core.query`'s.

One module per noun:

  schema.py        the tables (the models)
  migrations/      their Alembic revisions: the upgrade (`ingest db upgrade`) and the revision a store is at
  engines.py       SQLAlchemy engines: how one is made for a URL, and the one per URL a process shares
  database.py      `Database`: an engine's transactions, the schema check and upgrade, the planning lock
  records.py       what the store returns: run and group statuses, run, segment and audit records
  datasources.py   `Datasources`: a datasource's row (state, flags, its lock) and its spec history
  runs.py          `Runs`: runs and their task groups, deadlines and expiry
  offsets.py       `Offsets`: committed offsets and claimed ranges, read
  segments.py      `SegmentRecords`: the published segments' records, read
  task_reports.py  `TaskReports`: the Spark jobs' reports and a run's row stats
  dead_letters.py  `DeadLetterFiles`: the dead-letter files of published runs
  audit.py         `AuditLog`: who did what to a datasource
  metadata.py      `MetadataStore`: the database with one of each repository, the facade the rest of the code uses
  main_line.py     `MainLine`: the one transaction that moves a datasource's committed offsets (publish, reset,
                   reset-to-latest, set-offsets)
  publisher.py     the exactly-once publish, with its own SQL (claims, segment slots and records)
  reader.py        the rows of a datasource's visible segments, as Arrow or Spark (and its dead letters)
  iceberg.py       the datasource's Iceberg table, brought level with its visible segments
  cleanup.py       removing attempt folders of final runs that no segment record points into

Repository methods take what they are about first (a datasource's name; the plan to insert); `conn=`, always a
keyword and last, runs them inside the caller's transaction (required where only a locked transaction makes
sense), else in one of their own.
"""
