"""Operators: the tasks of one DAG run, one module each (`plan`, `spark_job`, `publish`, `report`), and what
they share about the run (`run`)."""
