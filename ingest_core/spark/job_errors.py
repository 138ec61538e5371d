"""Why a group's Spark job failed, as its report keeps it (`GroupFailure`): an error of this system as it was
raised; else the one a split recorded in its report as it stopped (Spark hands the driver only an exception's
text, the split's report keeps its code); else `JobFailedError`, named by Spark's own error condition
(`getCondition()` of pyspark's errors: `DIVIDE_BY_ZERO`, `UNRESOLVED_COLUMN...`; for `PYTHON_EXCEPTION`, the
Python exception its traceback parameter ends with). Only an error that Spark gives no condition (a lost
executor's, through py4j) is read from its text, and only to be shown: nothing decides on it."""

from __future__ import annotations

import re

from ingest_core.core.errors import IngestError, JobFailedError, error_for_code
from ingest_core.handover.report import latest_split_reports

PYTHON_EXCEPTION = "PYTHON_EXCEPTION"  # Spark's condition of an exception raised in a Python worker


def job_error(exc: BaseException, attempt_uri: str) -> tuple[IngestError, str]:
    """The error that failed a job and the name of its type (`GroupFailure.error_class`)."""
    if isinstance(exc, IngestError):
        return exc, type(exc).__name__
    splits, _ = latest_split_reports(attempt_uri)
    failures = [report.failure for _, report in sorted(splits.items()) if report.failure is not None]
    if failures:
        return error_for_code(failures[0].code, failures[0].message), failures[0].error_class
    error_class, message = spark_cause(exc)
    return JobFailedError(message), error_class


def spark_condition(exc: BaseException) -> str | None:
    """Spark's error condition of `exc` (pyspark's errors, classic and Connect), None when it gives none."""
    for name in ("getCondition", "getErrorClass"):  # getErrorClass: before Spark 4, deprecated since
        method = getattr(exc, name, None)
        if callable(method):
            try:
                condition = method()
            except Exception:  # noqa: BLE001 - an error object without its JVM side
                condition = None
            if condition:
                return str(condition)
    return None


def spark_cause(exc: BaseException) -> tuple[str, str]:
    """A failure no split's report explains, as people read it: (its name, the message)."""
    text = str(exc).strip()
    first = f"the Spark job failed: {text.splitlines()[0] if text else type(exc).__name__}"
    condition = spark_condition(exc)
    if condition == PYTHON_EXCEPTION:
        raised = python_exception(exc)
        if raised is not None:
            return raised[0], f"{first} ({raised[1]})"
    if condition is not None:
        return condition, first if condition in first else f"{first} [{condition}]"
    return _named_in_text(exc, text, first)


def python_exception(exc: BaseException) -> tuple[str, str] | None:
    """(type name, its line) of the Python exception a worker raised: the last line of the traceback Spark hands
    over as the `traceback` message parameter of PYTHON_EXCEPTION."""
    try:
        params = exc.getMessageParameters() or {}  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an error object without its JVM side
        return None
    lines = [line.strip() for line in str(params.get("traceback") or "").splitlines() if line.strip()]
    if not lines:
        return None
    name = lines[-1].split(":", 1)[0].rsplit(".", 1)[-1]
    return (name, lines[-1]) if name.isidentifier() else None


# "SomeError: message" lines of an error's text that has no condition: Python's and the JVM's exceptions
_EXCEPTION_LINE = re.compile(r"^\s*(?:[a-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt)): ")


def _named_in_text(exc: BaseException, text: str, first: str) -> tuple[str, str]:
    """An error Spark gives no condition (py4j's, a lost executor's): the last exception a Python traceback in its
    text raised, else the first exception named, else the wrapper's own type; the message, Spark's first line
    ending with that exception's own line."""
    lines = text.splitlines()
    traceback_at = max((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line),
                       default=None)
    named = [(i, m.group(1), line.strip()) for i, line in enumerate(lines) if (m := _EXCEPTION_LINE.match(line))]
    after = [(name, line) for i, name, line in named if traceback_at is not None and i > traceback_at]
    root = after[-1] if after else (named[0][1:] if named else None)
    if root is None:
        return type(exc).__name__, first
    return root[0], first if root[1] in first else f"{first} ({root[1]})"
