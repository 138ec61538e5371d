"""Entry points of the bounded Spark jobs (spark-submit runs these files); the code is in `ingest_core.spark`."""
