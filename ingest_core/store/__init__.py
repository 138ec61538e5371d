"""The metadata store (SQLAlchemy: PostgreSQL in production, SQLite embedded), the exactly-once publish, the
reader of a datasource's visible segments and the cleanup of job output nothing was published from."""
