"""spark-submit's entry point for one compaction job (the job itself: `ingest_core.spark.compaction`).

    spark-submit spark_jobs/compact_job.py --spec SPEC --job JOB

Exit codes: 0 success (the report lists the files written), 2 bad input (spec, job).
"""

import sys

from ingest_core.spark.compaction import main

if __name__ == "__main__":
    sys.exit(main())
