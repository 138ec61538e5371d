"""Every error class has a stable code, listed in docs/errors.md; a job's FAILED report carries the code its
split's executor recorded, and the driver raises that error again from the code, never from Spark's text."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ingest_core.core.errors import (
    IngestError,
    JobFailedError,
    OffsetOutOfRangeError,
    RunExpiredError,
    error_for_code,
)
from ingest_core.handover import deep_storage
from ingest_core.handover.report import ParseExceptionLimitError, SplitFailure, SplitReport
from ingest_core.spark.job_errors import job_error as _job_error

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"INGEST_[A-Z]+(?:_[A-Z]+)*")


def is_code(statement: ast.stmt) -> bool:
    """`code = "..."` or `code: ClassVar[str] = "..."`."""
    if isinstance(statement, ast.Assign):
        targets = [getattr(t, "id", None) for t in statement.targets]
    elif isinstance(statement, ast.AnnAssign):
        targets = [getattr(statement.target, "id", None)]
    else:
        return False
    return targets == ["code"] and isinstance(statement.value, ast.Constant)


def error_classes() -> dict[str, str | None]:
    """Every subclass of IngestError in the package (by its name) and the code its own body sets (None: none)."""
    classes: dict[str, tuple[list[str], str | None]] = {}
    for path in sorted((ROOT / "ingest_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                code = next((s.value.value for s in node.body if is_code(s)), None)
                classes[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], code)
    errors = {"IngestError"}
    while more := {name for name, (bases, _) in classes.items() if name not in errors and errors & set(bases)}:
        errors |= more
    return {name: classes[name][1] for name in sorted(errors)}


def test_every_error_class_has_a_code_of_its_own_listed_in_the_docs():
    classes = error_classes()
    assert len(classes) > 30
    assert [name for name, code in classes.items() if code is None] == []
    assert [f"{name}: {code}" for name, code in classes.items() if not CODE.fullmatch(code)] == []
    codes = list(classes.values())
    assert len(set(codes)) == len(codes), "two error classes share a code"
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(INGEST_\w+)` \| `(\w+)` \|",
                                                           (ROOT / "docs" / "errors.md").read_text(), re.M)}
    assert table == {code: name for name, code in classes.items()}


def test_an_error_comes_back_from_its_code():
    error = error_for_code(ParseExceptionLimitError.code, "Max parse exceptions [1] exceeded")
    assert type(error) is ParseExceptionLimitError and str(error) == "Max parse exceptions [1] exceeded"
    assert type(error_for_code(OffsetOutOfRangeError.code, "gone")) is OffsetOutOfRangeError
    # a class that needs more than its message, and a code this process does not know, keep their code
    expired = error_for_code(RunExpiredError.code, "run r1 expired")
    assert type(expired) is IngestError and expired.code == "INGEST_RUN_EXPIRED" and str(expired) == "run r1 expired"
    assert error_for_code("INGEST_SOMETHING_NEWER", "x").code == "INGEST_SOMETHING_NEWER"
    assert IngestError("plain").code == "INGEST_ERROR" == IngestError.code  # one error's code is not its class's


def test_a_second_class_may_not_take_a_code():
    with pytest.raises(TypeError, match="INGEST_RUN_EXPIRED of Imposter is RunExpiredError's already"):
        type("Imposter", (IngestError,), {"code": "INGEST_RUN_EXPIRED"})


def test_a_split_failure_records_the_code_or_that_the_error_is_not_ours():
    assert SplitFailure.of(ParseExceptionLimitError("too many")) == SplitFailure(
        "INGEST_PARSE_EXCEPTION_LIMIT", "ParseExceptionLimitError", "too many")
    not_ours = SplitFailure.of(OverflowError("too large"))
    assert not_ours == SplitFailure("INGEST_JOB_FAILED", "OverflowError", "too large")
    report = SplitReport(3, "t", 0, 0, 10, failure=SplitFailure.of(KeyError("k")))
    assert SplitReport.from_json(report.to_json()) == report


def write_split(attempt: str, index: int, failure: SplitFailure | None) -> None:
    report = SplitReport(index, "events", index, 0, 10, failure=failure)
    deep_storage.write_json(deep_storage.join(attempt, "progress", f"split-{index:05d}.json"), report.to_json())


def test_the_driver_reads_the_error_from_the_split_reports_not_from_sparks_text(tmp_path):
    attempt = tmp_path.as_uri()
    # Spark's text names another error entirely: the reports decide
    spark_text = RuntimeError("Job aborted. ParseExceptionLimitError: not this one")
    write_split(attempt, 0, None)
    write_split(attempt, 2, SplitFailure(OffsetOutOfRangeError.code, "OffsetOutOfRangeError", "cannot read t/2"))
    write_split(attempt, 1, SplitFailure(JobFailedError.code, "RuntimeError", "Kafka error while reading t/1"))
    error, error_class = _job_error(spark_text, attempt)
    assert (type(error), error.code, str(error), error_class) == (
        JobFailedError, "INGEST_JOB_FAILED", "Kafka error while reading t/1", "RuntimeError")  # the first split's

    # no split said why (an executor lost): JobFailedError, Spark's own account shown as it names it
    lost = RuntimeError("Job aborted due to stage failure: Task 0 in stage 1.0 failed\n"
                        "org.apache.spark.SparkException: executor 1 lost")
    error, error_class = _job_error(lost, (tmp_path / "none").as_uri())
    assert (type(error), error.code, error_class) == (JobFailedError, "INGEST_JOB_FAILED", "SparkException")
    assert str(error) == ("the Spark job failed: Job aborted due to stage failure: Task 0 in stage 1.0 failed "
                          "(org.apache.spark.SparkException: executor 1 lost)")

    raised_here = OffsetOutOfRangeError("on the driver")
    assert _job_error(raised_here, attempt) == (raised_here, "OffsetOutOfRangeError")
