"""Operators: the tasks of one DAG run (`plan`: plan and replan; `spark_job`; `publish`; `report`) and of the
compaction DAG (`compaction`), each a few lines over the supervisor's step (`ingest_core.supervisor`), and the
adapter they share (`run.airflow_step`)."""
