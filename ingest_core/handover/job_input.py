"""What a run's Spark job is given, as typed values (Spark's `KafkaBatchInputPartition`: the driver plans typed
partitions, each task reads its own): `GroupInput`, one task group's share of a run's plan, staged by the plan
step in the run's folder, one file per group and plan revision; and `JobInput`, what one job (a group x replica)
is handed through Airflow: where its group's input is and where it writes. No job reads another group's input
or the whole plan (13 MB of JSON at 100,000 partitions), and nothing is parsed back out of argv but at the
spark-submit edge (`JobInput.to_args` / `from_args`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from ingest_core.core.errors import IngestError
from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.core.planner import Plan, TaskGroup

# Bumped when a field changes meaning or goes; a job refuses an input of a version it does not know.
GROUP_INPUT_VERSION = 1


class BadJobInput(IngestError):
    """The job's input does not name a usable spec and task group (the job's exit code 2)."""

    code = "INGEST_JOB_INPUT_INVALID"


@dataclass(frozen=True)
class GroupInput:
    """One task group of one plan revision of a run, and what its job needs of the run besides: the staged
    spec (`spec_uri`, and the spec file its literal secrets are read from), the groups' creation time (late and
    early message rejection) and the Kafka ids of the group's topics as planned."""

    datasource: str
    run_id: str
    revision: int
    created_at: datetime
    group: TaskGroup
    spec_uri: str
    secrets_from: str | None = None
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    version: int = GROUP_INPUT_VERSION

    @classmethod
    def of_plan(cls, plan: Plan, group_id: int, spec_uri: str, secrets_from: str | None = None) -> "GroupInput":
        group = plan.group(group_id)
        topics = {p.tp.topic for p in group.partitions}
        return cls(plan.datasource, plan.run_id, plan.revision, plan.created_at, group, spec_uri, secrets_from,
                   {t: i for t, i in plan.topic_ids.items() if t in topics})

    @property
    def group_id(self) -> int:
        return self.group.group_id

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "datasource": self.datasource, "runId": self.run_id,
                "revision": self.revision, "createdAt": format_datetime(self.created_at),
                "specUri": self.spec_uri, "secretsFrom": self.secrets_from,
                "topicIds": dict(sorted(self.topic_ids.items())), "group": self.group.to_json()}

    @classmethod
    def from_json(cls, d: Any, where: str) -> "GroupInput":
        if not isinstance(d, dict):
            raise BadJobInput(f"{where}: a task group's input is a JSON object, not {type(d).__name__}")
        version = d.get("version")
        if version != GROUP_INPUT_VERSION:
            raise BadJobInput(f"{where}: task group input version {version!r}, this job reads version "
                              f"{GROUP_INPUT_VERSION}: run the job with the version of this project that planned "
                              "the run, or let the run fail (its range is read again by the next run)")
        try:
            return cls(str(d["datasource"]), str(d["runId"]), int(d["revision"]), parse_datetime(d["createdAt"]),
                       TaskGroup.from_json(d["group"]), str(d["specUri"]), d.get("secretsFrom"),
                       dict(d.get("topicIds") or {}), version)
        except (KeyError, TypeError, ValueError) as exc:
            raise BadJobInput(f"{where}: not a task group's input ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class JobInput:
    """One Spark job of a run (a task group x replica): where its `GroupInput` is staged and the replica's output
    folder. The value the plan and re-plan steps hand the DAG's Spark job tasks (XCom, as `to_json`)."""

    input_uri: str
    group_id: int
    replica: int
    output_uri: str

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input_uri, "group": self.group_id, "replica": self.replica, "output": self.output_uri}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "JobInput":
        try:
            return cls(str(d["input"]), int(d["group"]), int(d["replica"]), str(d["output"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadJobInput(f"not a Spark job's input: {dict(d)!r} ({type(exc).__name__}: {exc})") from None

    def to_args(self) -> list[str]:
        """`spark_jobs/ingest_job.py`'s arguments (spark-submit's edge: the one place argv is written)."""
        return ["--input", self.input_uri, "--group", str(self.group_id), "--replica", str(self.replica),
                "--output", self.output_uri]


@dataclass(frozen=True)
class CompactionInput:
    """One compaction job of the compaction DAG (`supervisor.compaction`): the staged spec and its job
    (`core.compaction.CompactionJob`, JSON). The search step's value for the DAG's `compact` tasks."""

    spec_uri: str
    job_uri: str

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec_uri, "job": self.job_uri}

    @classmethod
    def from_json(cls, d: Any) -> "CompactionInput":
        """From its JSON, or from the argv a search of an earlier version handed over (`--spec S --job J`)."""
        if isinstance(d, list) and "--spec" in d[:-1] and "--job" in d[:-1]:
            d = {"spec": d[d.index("--spec") + 1], "job": d[d.index("--job") + 1]}
        try:
            return cls(str(d["spec"]), str(d["job"]))
        except (KeyError, TypeError, IndexError) as exc:
            raise BadJobInput(f"not a compaction job's input: {d!r} ({type(exc).__name__}: {exc})") from None

    def to_args(self) -> list[str]:
        """`spark_jobs/compact_job.py`'s arguments."""
        return ["--spec", self.spec_uri, "--job", self.job_uri]
