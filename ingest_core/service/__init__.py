"""The operations surface: a datasource's status and health (Druid's rules) and the `ingest` CLI, whose operator
actions are the supervisor's (`ingest_core.supervisor.actions`). The Airflow UI plugin
(`ingest_core.provider.plugins`) serves the same over HTTP."""
