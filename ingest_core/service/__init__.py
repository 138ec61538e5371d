"""The operations surface: a datasource's status and health (Druid's rules), operator actions (suspend, resume,
terminate, reset, set offsets; audited) and the `ingest` CLI. The Airflow UI plugin
(`ingest_core.provider.plugins`) serves the same over HTTP."""
