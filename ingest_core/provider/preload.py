"""Imported by a scheduler before it forks its LocalExecutor workers (from `airflow_local_settings.py`): each task
process they fork then starts with the DAG factory and the Spark Connect client loaded, instead of importing them
(docs/spark-connect.md), and the supervisor's steps that the tasks load as they run (`provider.operators.run`). It
starts no thread (tests/unit/test_preload.py)."""

import pyspark.sql.connect.functions  # noqa: F401
import pyspark.sql.connect.session  # noqa: F401

import ingest_core.provider.dag_factory  # noqa: F401
import ingest_core.spark.connect  # noqa: F401
import ingest_core.spark.job  # noqa: F401
import ingest_core.supervisor.compaction  # noqa: F401
import ingest_core.supervisor.publish  # noqa: F401
import ingest_core.supervisor.report  # noqa: F401
import ingest_core.supervisor.run  # noqa: F401
