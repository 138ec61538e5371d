"""The Spark job: the driver's code for one task group (`job`), the reader of the fixed offset ranges that each Spark
task runs (`kafka_source`), and Spark Connect sessions with this project's code (`connect`).
`spark_jobs/ingest_job.py` is spark-submit's entry point into `job`."""
