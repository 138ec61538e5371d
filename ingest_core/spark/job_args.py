"""The ingest job's input: its command line (spark-submit's edge, `JobInput.to_args`), and what that names, read
from deep storage: the staged spec and its own task group's input (`handover.job_input.GroupInput`), never the
whole plan. `GroupJob` is the job they make; the spark-submit entry point and the Spark Connect runner
(`ingest_core.spark.connect`) share `load_job`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ingest_core.core.defaults import PROGRESS_INTERVAL_S, STALL_TIMEOUT_S
from ingest_core.core.errors import IngestError
from ingest_core.core.planner import Plan, TaskGroup
from ingest_core.core.spec import DatasourceSpec, load_spec, parse_spec_text
from ingest_core.handover import deep_storage
from ingest_core.handover.job_input import BadJobInput, GroupInput, JobInput
from ingest_core.kafka.storage_secrets import use_deep_storage

USAGE = "spark-submit spark_jobs/ingest_job.py --input GROUP_INPUT [--group N] [--replica R] [--output URI]"


@dataclass(frozen=True)
class GroupJob:
    spec: DatasourceSpec
    input: GroupInput
    replica: int
    output_uri: str  # the replica's folder; this attempt writes under it, in a folder of its own
    progress_interval_s: float = PROGRESS_INTERVAL_S
    # new per attempt: the job's input is shared by every retry of a task
    attempt: str = field(default_factory=deep_storage.new_attempt_id)

    @classmethod
    def of_plan(cls, spec: DatasourceSpec, plan: Plan, group_id: int, replica: int, output_uri: str,
                **kwargs: float | str) -> "GroupJob":
        """The job of one group of `plan` (in-process runs: tests, benchmarks), with the input the plan step
        would stage for it."""
        return cls(spec, GroupInput.of_plan(plan, group_id, ""), replica, output_uri, **kwargs)  # type: ignore[arg-type]

    @property
    def run_id(self) -> str:
        return self.input.run_id

    @property
    def group_id(self) -> int:
        return self.input.group_id

    @property
    def group(self) -> TaskGroup:
        return self.input.group

    @property
    def attempt_uri(self) -> str:
        return deep_storage.attempt_uri(self.output_uri, self.attempt)


def load_job_spec(spec_uri: str, secrets_from: str | None = None) -> DatasourceSpec:
    """The job's spec. A staged spec is redacted; literal secrets come from the spec file it was staged from,
    here on the driver, which resolves them into the Kafka client config only (`job._ingest`)."""
    original = load_spec(secrets_from) if secrets_from else None
    if original is not None:
        use_deep_storage(original)  # the staged copy may be on the object store those settings reach
    spec = parse_spec_text(deep_storage.read_text(spec_uri), spec_uri)
    use_deep_storage(spec)
    return spec.with_secrets_from(original) if original is not None else spec


def argument_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ingest_job", usage=USAGE,
                                 description="The bounded Spark ingest job of one task group of one run.")
    ap.add_argument("--input", required=True, help="the task group's input, as the plan step staged it (JSON URI)")
    ap.add_argument("--group", type=int, help="the task group id (checked against the input's)")
    ap.add_argument("--replica", type=int, default=0)
    ap.add_argument("--output", help="where to stage segments and the report (default: deep storage layout)")
    ap.add_argument("--stall-timeout", type=float, default=STALL_TIMEOUT_S,
                    help="seconds without progress before a split fails (unreachable broker)")
    return ap


def job_input(args: argparse.Namespace) -> JobInput:
    """The typed input the command line spells (`JobInput.to_args` wrote it); the output defaults to the deep
    storage layout, resolved once the group's input is read (`load_job`)."""
    return JobInput(args.input, -1 if args.group is None else args.group, args.replica, args.output or "")


def load_job(job: JobInput) -> GroupJob:
    """The group job `job` names, read from deep storage; `BadJobInput` when it names none."""
    where = f"the task group input {job.input_uri}"
    try:
        staged = GroupInput.from_json(deep_storage.read_json(job.input_uri), where)
        spec = load_job_spec(staged.spec_uri, staged.secrets_from)
    except BadJobInput:
        raise
    except (IngestError, KeyError, ValueError, OSError) as exc:
        raise BadJobInput(f"{where}: {exc}") from None
    if job.group_id not in (-1, staged.group_id):
        raise BadJobInput(f"{where} is task group {staged.group_id}'s, not task group {job.group_id}'s")
    if staged.datasource != spec.datasource:
        raise BadJobInput(f"{where} is for {staged.datasource!r}, its spec for {spec.datasource!r}")
    output = job.output_uri or deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, staged.run_id,
                                                      staged.group_id, job.replica)
    return GroupJob(spec, staged, job.replica, output)
