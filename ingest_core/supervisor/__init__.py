"""The supervisor owns a datasource's loop (Druid's `SeekableStreamSupervisor`): a run's steps (`run`: plan;
`publish`; `report`; each expires the runs past their deadline first), planning with its I/O (`planning`), the
compaction DAG's steps (`compaction`) and the operator actions (`actions`). Each is a function of typed inputs;
Airflow's operators and the CLI only gather them. States: `ingest_core.core.states`; `docs/supervisor.md`."""
