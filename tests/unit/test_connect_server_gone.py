"""`connect.server_gone`: which failures of a job over Spark Connect say its server went away (so `run_job` runs
the job again at once on a new session), told by gRPC's status code and Spark's error condition, through the
errors the job wraps them in; never a job's own failure, nor a session that could not be opened in time."""

from __future__ import annotations

import grpc
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from ingest_core.core.errors import JobFailedError, SparkConnectUnavailableError
from ingest_core.spark.connect import server_gone


def wrapped(cause: BaseException) -> BaseException:
    """As `run_group` raises it: the job's typed error, from Spark's."""
    try:
        raise JobFailedError("the Spark job failed") from cause
    except JobFailedError as exc:
        return exc


def test_unavailable_past_the_retries_and_a_restarted_server_are_a_server_gone():
    unavailable = SparkConnectGrpcException("failed to connect", grpc_status_code=grpc.StatusCode.UNAVAILABLE)
    changed = SparkConnectGrpcException("the session changed", errorClass="INVALID_HANDLE.SESSION_CHANGED",
                                        messageParameters={})
    assert server_gone(unavailable) and server_gone(changed)
    assert server_gone(wrapped(unavailable)) and server_gone(wrapped(changed))


def test_a_jobs_own_failure_or_a_session_never_opened_is_not():
    assert not server_gone(wrapped(SparkConnectGrpcException("bad plan", errorClass="UNRESOLVED_COLUMN.WITH_SUGGESTION",
                                                              messageParameters={})))
    assert not server_gone(wrapped(ValueError("a parse error")))
    never = SparkConnectUnavailableError("did not accept a session within 30s", endpoint="sc://x:1", deadline_s=30)
    assert not server_gone(never) and not server_gone(wrapped(never))
