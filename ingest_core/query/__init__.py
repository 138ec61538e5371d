"""SQL over the datasources: Druid SQL read, translated for DuckDB and run in a sandbox over the visible segments
the store has published, and its result written in Druid's result formats. It stands on the store (to read
segments and their schemas) and is used by the service (`ingest query`, the SQL API, whose worker processes run
`engine.run_sql`); the store knows nothing of it.

One module per noun:

  engine.py               `run_sql`: one read-only statement in a DuckDB of its own (the sandbox: no file,
                          network or extension access, its limits), over the visible segments it names
  limits.py               `SqlLimits` (what one query may take of a server) and `QueryCancel`
  errors.py               the query's errors, each with its code
  tree.py                 what a query reads, from DuckDB's parse tree: tables, refused functions, the catalog
  catalog.py              SHOW TABLES and Druid's INFORMATION_SCHEMA of the datasources the caller may read
  system_tables.py        Druid's sys.segments, sys.tasks and sys.supervisors of those datasources
  columns.py              a datasource's columns in Druid's order (the spec's), and their SQL types
  datasets.py             a datasource's visible segments as one Arrow dataset of their merged schema
  druid_sql.py            Druid SQL rewritten for DuckDB (sqlglot): the walk, the function table, the refusals
  arguments.py            a Druid function's literal arguments, and the DuckDB nodes the rewrites build
  time_functions.py       TIME_FLOOR, TIME_FORMAT, ...: Druid's time functions and their zones
  aggregate_functions.py  LATEST / EARLIEST, ANY_VALUE, DataSketches aggregates and functions on sketches
  scalar_functions.py     JSON, string, number and bitwise functions DuckDB spells otherwise
  sketch_functions.py     Druid's DataSketches functions as DuckDB UDFs
  results.py              the one writer of a result: Druid's result formats and headers, `ingest query`'s table
"""
