"""What a run's Spark jobs read, staged in deep storage by the plan and re-plan steps: the spec (redacted) and
one `GroupInput` per task group and plan revision (`handover.job_input`), so each job reads its own group's
input and nothing else. The steps hand the DAG one `JobInput` per task group x replica.

A run planned by an earlier version of this project handed its jobs argv lists naming the whole plan
(`--spec S --plan P --group N --replica R --output O`); such a run still in flight when the project is upgraded
finishes: `job_input_of_legacy_args` stages that group's input from its plan.json once, and the job runs as
any other."""

from __future__ import annotations

from ingest_core.core.planner import Plan
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor.formats.protobuf_descriptors import inline_descriptors
from ingest_core.handover import deep_storage
from ingest_core.handover.job_input import BadJobInput, GroupInput, JobInput


def run_folder(spec: DatasourceSpec, run_id: str) -> str:
    return deep_storage.run_uri(deep_storage.base_for(spec), spec.datasource, run_id)


def input_uri(run_folder_uri: str, revision: int, group_id: int) -> str:
    """A group's input of one plan revision: a re-plan stages new inputs beside (never over) those its earlier
    jobs may still be reading."""
    return deep_storage.join(run_folder_uri, "input", f"revision={revision}", f"group={group_id}.json")


def stage_plan(spec: DatasourceSpec, plan: Plan) -> list[JobInput]:
    """Stage the spec and each task group's input where the run's jobs read them (a cleared run re-executes this
    plan); the jobs, one per task group x replica with something to read."""
    folder = run_folder(spec, plan.run_id)
    spec_uri, secrets_from = stage_spec(spec, folder)
    base = deep_storage.base_for(spec)
    jobs = []
    for group in plan.groups:
        if group.is_empty:
            continue
        uri = input_uri(folder, plan.revision, group.group_id)
        deep_storage.write_json(uri, GroupInput.of_plan(plan, group.group_id, spec_uri, secrets_from).to_json())
        jobs += [JobInput(uri, group.group_id, replica,
                          deep_storage.group_uri(base, spec.datasource, plan.run_id, group.group_id, replica))
                 for replica in range(spec.io_config.replicas)]
    return jobs


def stage_spec(spec: DatasourceSpec, folder: str) -> tuple[str, str | None]:
    """Stage the spec for the run's Spark jobs; returns its URI and the spec file its secrets are read from. The
    staged copy is redacted like every stored one: a literal secret stays in the spec file under `dags/`, which
    the job's driver reads it from, so no secret lands in deep storage, XCom or the logs."""
    uri = deep_storage.join(folder, "spec.json")
    # a protobuf descriptor file is read here, beside the spec: the executors may not see that path
    deep_storage.write_json(uri, inline_descriptors(spec).to_raw())
    # the driver reads the staged copy from deep storage: an object store's settings come from the spec file too
    secrets_from = spec.has_literal_secrets or spec.microbatch.deep_storage.s3 is not None
    return uri, (str(spec.source) if secrets_from else None)


LEGACY_OPTIONS = ("--spec", "--plan", "--group", "--replica", "--output", "--secrets-from")


def job_input_of_legacy_args(args: list[str]) -> JobInput:
    """The `JobInput` of a job an earlier version planned (its argv, from the run's XCom): its group's input is
    staged from the run's plan.json (under the revision-0 name of the old staging: `input/legacy/`), once."""
    options = _options(args)
    try:
        plan_uri, spec_uri, group_id = options["--plan"], options["--spec"], int(options["--group"])
        replica = int(options.get("--replica", "0"))
    except (KeyError, ValueError) as exc:
        raise BadJobInput(f"the job's arguments {args!r} name no plan, spec and task group ({exc}): the run was "
                          "planned by an unknown version; let it fail (the next run reads its range)") from None
    folder = plan_uri.rsplit("/", 1)[0]
    uri = deep_storage.join(folder, "input", "legacy", f"group={group_id}.json")
    try:
        deep_storage.read_text(uri)
    except FileNotFoundError:
        plan = Plan.from_json(deep_storage.read_json(plan_uri))
        try:
            staged = GroupInput.of_plan(plan, group_id, spec_uri, options.get("--secrets-from"))
        except KeyError as exc:
            raise BadJobInput(str(exc)) from None
        deep_storage.write_json(uri, staged.to_json())
    output = options.get("--output") or deep_storage.join(folder, f"group={group_id}", f"replica={replica}")
    return JobInput(uri, group_id, replica, output)


def _options(args: list[str]) -> dict[str, str]:
    out = {}
    for i, arg in enumerate(args[:-1]):
        if arg in LEGACY_OPTIONS:
            out[arg] = args[i + 1]
    return out
