"""Kafka -> Parquet segments, exactly once: Druid's Kafka supervisor as Airflow-driven Spark microbatches.

The spine, top-down: `core.spec` (what to ingest) -> `supervisor.planning` + `core.offsets` + `core.planner`
(what one run reads) -> `spark.job` (the bounded Spark job) -> `store.publisher` (the one exactly-once commit)
-> `store.metadata` (where it is recorded). The packages say where code runs: `core` (anywhere, pure),
`executor` (Spark executors), `kafka`, `spark`, `store`, `supervisor`, `provider` (Airflow), `service`
(CLI, status, actions), `dev` (demo and embedded servers). `ingest_core.metadata`, `.reader` and `.triggers`
are the old import paths, kept for code and Airflow databases that name them.
"""

__version__ = "0.1.0"
