"""The Spark settings every ingest and compaction job runs with: those its output depends on (`REQUIRED_CONF`,
always), the defaults a spec's `microbatch.spark.conf` may change (`default_conf`), and the session builder that
applies them without replacing what spark-submit was given."""

from __future__ import annotations

import os
import sys
from typing import Any, Collection

# Settings the job's output depends on: always these, whatever was submitted.
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
}


def default_conf() -> dict[str, str]:
    """Defaults that a spec's `microbatch.spark.conf` (spark-submit's --conf) may change."""
    # pyspark's DataFrame debugging records each DataFrame call's Python call site for Spark's error messages: a
    # stack walk and a failed IPython import per call, and the calls are ours. A static setting: a Spark Connect
    # server needs it at its start (docs/spark-connect.md), where the Connect client skips it
    return {"spark.sql.shuffle.partitions": os.environ.get("INGEST_SPARK_SHUFFLE_PARTITIONS", "4"),
            "spark.ui.showConsoleProgress": "false", "spark.python.sql.dataFrameDebugging.enabled": "false"}


def spark_session_builder(app_name: str, submitted: Collection[str] = ()) -> Any:
    """Settings every run of this job needs, whatever the master. `submitted`: the settings spark-submit
    was given (`submitted_conf()`); a builder's settings would replace them, so the defaults leave them be."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in default_conf().items():
        if key not in submitted:
            builder = builder.config(key, value)
    return builder.config(map=REQUIRED_CONF)


def submitted_conf() -> set[str]:
    """The settings spark-submit gave this driver (--conf, spark-defaults.conf); none outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM, whose system properties hold them
    return {key for key, _ in SparkConf().getAll()}


def sql_settings() -> list[str]:
    """The Spark SQL settings the job logs as its session has them."""
    return sorted(k for k in {**default_conf(), **REQUIRED_CONF} if k.startswith("spark.sql."))
