"""Operators: the tasks of one DAG run, one module each (`plan`, `spark_job`, `publish`, `report`), each a few
lines over the supervisor's step (`ingest_core.supervisor`), and the adapter they share (`run.airflow_step`)."""
