"""SQL over the datasources: Druid SQL read, translated for DuckDB and run in a sandbox over the visible segments
the store has published, and its result written in Druid's result formats. It stands on the store (to read
segments) and is used by the service (`ingest query`, the SQL API); the store knows nothing of it.

One module per noun:

  engine.py            `run_sql`: one read-only statement in a DuckDB of its own (the sandbox), over the
                       visible segments of the datasources it names
  tree.py              what a query reads, from DuckDB's parse tree (tables, refused functions, the catalog)
  druid_sql.py         Druid SQL rewritten for DuckDB (sqlglot)
  sketch_functions.py  Druid's DataSketches functions as DuckDB UDFs
  results.py           a result's values as JSON values, and the result formats
"""
