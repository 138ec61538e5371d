"""Kafka -> Parquet segments, exactly once: Druid's Kafka supervisor as Airflow-driven Spark microbatches.

The spine, top-down: `spec` (what to ingest) -> `supervisor` + `offsets` + `planner` (what one run reads) ->
Spark job (`spark_jobs/`) -> `publisher` (the one exactly-once commit) -> `metadata` (where it is recorded).
"""

__version__ = "0.1.0"
