"""The pure core: datasource specs (parsing, binding, granularity), periods, offsets, planning, the segment
timeline, errors and settings. Runs anywhere (Airflow workers, the CLI, Spark's driver and executors); imports
no I/O library (no SQLAlchemy, Airflow, confluent-kafka, PySpark or pyarrow), so it is tested in milliseconds."""
