"""The Airflow shell, laid out as an Airflow provider: `hooks/` (endpoints from connections), `operators/` (a
run's tasks; the plan task holds the data gate), `triggers/` (the data gate's wait, in the triggerer), `plugins/` (the UI pages and
Druid's supervisor REST API), and `dag_factory` (one DAG per spec). The only package that imports Airflow
(besides `ingest_core.kafka.secrets` and `ingest_core.kafka.storage_secrets`, which read Airflow connections a
spec names)."""
