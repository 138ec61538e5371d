"""What a job hands over to the rest of the system, and where it puts it: deep storage's paths and files
(`deep_storage`), the task group's report with its row stats, parse exceptions and staged segments (`report`),
and the dead-letter files of the records it could not ingest (`dead_letters`). The Spark job writes them (on
the driver and on executors); the publish, the store, status and the CLI read them. pyarrow only, like
`ingest_core.executor` (which stands on this package): never Airflow, SQLAlchemy or a Kafka client."""
