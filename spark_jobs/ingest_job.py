"""spark-submit's entry point for one task group of one run (the job itself: `ingest_core.spark.job`).

    spark-submit spark_jobs/ingest_job.py --spec SPEC --plan PLAN --group N [--replica R] [--output URI]
        [--secrets-from SPEC_FILE]

Exit codes: 0 success, 2 bad input (spec, plan, group), 3 the group failed (report written, state FAILED).
"""

import sys

from ingest_core.spark.job import main

if __name__ == "__main__":
    sys.exit(main())
