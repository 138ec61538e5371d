from __future__ import annotations

from ingest_core.spec import DatasourceSpec, parse_spec


def make_spec(bootstrap: str, datasource: str = "wiki", *, topic: str | None = None, topic_pattern: str | None = None,
              tuning: dict | None = None, microbatch: dict | None = None, **io) -> DatasourceSpec:
    io_config = {"inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": bootstrap}, **io}
    if topic is not None:
        io_config["topic"] = topic
    if topic_pattern is not None:
        io_config["topicPattern"] = topic_pattern
    raw = {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": datasource, "timestampSpec": {"column": "ts"},
                           "granularitySpec": {"segmentGranularity": "HOUR"}},
            "ioConfig": io_config,
            "tuningConfig": {"type": "kafka", **(tuning or {})},
        },
    }
    if microbatch:
        raw["microbatch"] = microbatch
    return parse_spec(raw, f"<test spec {datasource}>")


def ingest_run(spark, store, spec: DatasourceSpec, run_id: str, deep_storage_uri: str, *, stall_timeout_s: float = 30,
               options=None):
    """Plan a run, run every task group's Spark job in this session, publish: the spine without Airflow.
    Returns (plan, group reports, publish result)."""
    from ingest_core import deep_storage
    from ingest_core.publisher import GroupResult, Publisher
    from ingest_core.supervisor import PlanOptions, Supervisor
    from spark_jobs.ingest_job import GroupJob, run_group

    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan = supervisor.plan(run_id, options or PlanOptions()).plan
    reports = []
    for group in plan.groups:
        out = deep_storage.group_uri(deep_storage_uri, spec.datasource, run_id, group.group_id)
        reports.append(run_group(spark, GroupJob(spec, plan, group.group_id, 0, out), stall_timeout_s))
    result = Publisher(store).publish(spec.datasource, run_id, [GroupResult.from_report(r.to_json()) for r in reports])
    for r in reports:  # as the DAG's publish step keeps them
        store.add_task_report(spec.datasource, run_id, r.group_id, r.to_json(), replica=r.replica)
    return plan, reports, result


def spec_from(bootstrap: str, topic: str, data_schema: dict, *, io: dict | None = None, tuning: dict | None = None,
              microbatch: dict | None = None, datasource: str = "ds") -> DatasourceSpec:
    """A spec with a full dataSchema, reading `topic` from the earliest offset."""
    raw = {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": datasource, **data_schema},
            "ioConfig": {"topic": topic, "useEarliestOffset": True, "inputFormat": {"type": "json"},
                         "consumerProperties": {"bootstrap.servers": bootstrap}, **(io or {})},
            "tuningConfig": {"type": "kafka", **(tuning or {})},
        },
        "microbatch": microbatch or {},
    }
    return parse_spec(raw, f"<test spec {datasource}>")
