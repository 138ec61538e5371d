"""Kafka -> Parquet segments, exactly once: Druid's Kafka supervisor as Airflow-driven Spark microbatches.

The spine, top-down: `core.spec` (what to ingest) -> `supervisor.planning` + `core.offsets` + `core.planner`
(what one run reads) -> `spark.job` (the bounded Spark job) -> `store.publisher` (the one exactly-once commit)
-> `store.metadata` (where it is recorded). The packages say where code runs: `core` (anywhere, pure),
`executor` (Spark executors), `kafka`, `spark`, `store`, `supervisor`, `provider` (Airflow), `service`
(CLI, status, actions), `dev` (demo and embedded servers).
"""

__version__ = "0.1.0"
