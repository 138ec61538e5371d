"""What a Spark executor runs on each split: decoding records (`formats`) and parsing them into rows,
timestamps, transforms (Druid expressions), filters and rollup. The report, deep storage's layout and the
dead-letter files it writes are `ingest_core.handover`'s. pyarrow only: never Airflow, SQLAlchemy, the metadata
store or a Kafka client (the split's reader in `ingest_core.spark.kafka_source` consumes and hands this package
record chunks)."""
