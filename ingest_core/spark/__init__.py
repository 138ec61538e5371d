"""The Spark job: the driver's code for one task group (`job`), the Python data source that reads a fixed offset
range on the executors (`kafka_source`), and Spark Connect sessions with this project's code (`connect`).
`spark_jobs/ingest_job.py` is spark-submit's entry point into `job`."""
