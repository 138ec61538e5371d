"""What a Spark executor runs on each split: decoding and parsing records, timestamps, transforms (Druid
expressions), filters, rollup, row stats and parse exceptions, and the segment files' layout in deep storage.
pyarrow only: never Airflow, SQLAlchemy, the metadata store or a Kafka client (the split's reader in
`ingest_core.spark.kafka_source` consumes and hands this package record chunks)."""
