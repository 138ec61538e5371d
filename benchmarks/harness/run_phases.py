"""Where a DAG run's seconds went, from Airflow's own records and the product's (benchmarks/freshness.py).

Per DAG run of the datasource: Airflow's task instances (queued, start and end times in Airflow's database) give
each task's wait (from its upstream's end, or the run's start, to its own start: the scheduler, the executor and
the task process starting) and its run (start to end: the task process, DAG file parse included); the metadata
store's run record gives the records the run planned and when it published; the Spark job's stored report gives
the job's own seconds in Spark and, within them, its slowest split's (the split reader, in `mapInArrow`, reading and
parsing its offset range; the sort and the Parquet write come after it in the same Spark task, with Spark's scheduling
they are the rest of the job's seconds).

An event waits for the next run to plan (half the time between plans, on average), then for that run to publish:
`plan to visible` (the plan task's start to the publish task's end) and the time between plans are the two
figures freshness is made of; the phases say what each is made of.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.fixed_cost_setup import to_epoch

# (name, what it is) in a run's order; every figure in seconds
PHASES: list[tuple[str, str]] = [
    ("between plans", "this run's plan start - the one before it (an event waits half of it on average)"),
    ("runs apart", "this run's start - the previous run's end (the scheduler's gap; < 0 when runs overlap)"),
    ("gate wait", "the run's start to the data gate's start (runs before the gate moved into the plan task)"),
    ("gate", "the data gate task (runs before the gate moved into the plan task)"),
    ("plan wait", "upstream end to the plan task's start"),
    ("plan", "the plan task (its data gate's look, and any wait in the triggerer, included)"),
    ("jobs wait", "the plan's end to the first Spark job task's start"),
    ("jobs", "first Spark job task's start to the last one's end"),
    ("job in Spark", "the Spark job's own seconds (its report; the longest of the run's groups)"),
    ("  setup", "within it: the job's DataFrames built (the read's schema on the driver; Connect asks the "
                "server for the others' schemas)"),
    ("  before the read", "the Spark action's start to the first split's start: Spark's planning and "
                          "scheduling, the task's Python worker started"),
    ("  read+parse", "the slowest split: Kafka, parsing, Arrow batches handed to Spark (the split reader)"),
    ("  after the read", "the last split's end to the action's end: the sort, the Parquet write, the commit"),
    ("  footers", "the action's end to the job's end: the splits' reports and the segments' footers read"),
    ("job task overhead", "jobs - job in Spark: the task process, the Connect session, the DAG file parse"),
    ("publish wait", "the last job's end to the publish task's start"),
    ("publish", "the publish task"),
    ("report wait", "the publish's end to the report task's start"),
    ("report", "the report task"),
    ("plan to visible", "the plan task's start to the publish task's end"),
    ("run", "the DAG run's start to its end"),
]


@dataclass
class RunPhases:
    run_id: str
    records: int | None  # planned (the metadata store's run record); None: the run planned nothing
    plan_start: float | None  # epoch s
    phases: dict[str, float] = field(default_factory=dict)
    processes: int = 0  # task instances that ran (a skipped one starts no process; a deferral's resume is not seen)


def collect(query: Any, store: Any, datasource: str) -> list[RunPhases]:
    """Each DAG run of `datasource` with its phases, in the order the runs started. `query(sql, **params)`:
    rows of Airflow's database; `store`: the metadata store."""
    runs = query("SELECT run_id, start_date, end_date FROM dag_run WHERE dag_id = :d AND start_date IS NOT NULL "
                 "ORDER BY start_date", d=datasource)
    tis: dict[str, dict[str, list[tuple[float | None, float | None]]]] = {}
    for run_id, task_id, start, end in query(
            # a skipped task ran nothing (a gate that ended its run idle skips the rest, stamping them with its end)
            "SELECT run_id, task_id, start_date, end_date FROM task_instance WHERE dag_id = :d "
            "AND (state IS NULL OR state != 'skipped')", d=datasource):
        tis.setdefault(run_id, {}).setdefault(task_id, []).append((to_epoch(start), to_epoch(end)))
    records = {r.run_id: r for r in store.runs.recent(datasource, limit=None)}
    reports: dict[str, list[Any]] = {}
    for report in store.reports.of(datasource):
        reports.setdefault(report.run_id, []).append(report)

    out: list[RunPhases] = []
    previous_end: float | None = None
    for run_id, run_start, run_end in runs:
        start, end = to_epoch(run_start), to_epoch(run_end)
        tasks = tis.get(run_id, {})
        record = records.get(run_id)
        phases: dict[str, float] = {}

        def span(task: str) -> tuple[float | None, float | None]:
            times = tasks.get(task, [])
            starts = [s for s, _ in times if s is not None]
            ends = [e for _, e in times if e is not None]
            return (min(starts) if starts else None), (max(ends) if ends and len(ends) == len(times) else None)

        def put(name: str, a: float | None, b: float | None) -> None:
            if a is not None and b is not None:
                phases[name] = b - a

        gate, plan, jobs, publish, report = (span(t) for t in ("data_gate", "plan", "spark_job", "publish", "report"))
        put("runs apart", previous_end, start)
        put("gate wait", start, gate[0])
        put("gate", *gate)
        put("plan wait", gate[1] if "data_gate" in tasks else start, plan[0])
        put("plan", *plan)
        put("jobs wait", plan[1], jobs[0])
        put("jobs", *jobs)
        put("publish wait", jobs[1], publish[0])
        put("publish", *publish)
        put("report wait", publish[1], report[0])
        put("report", *report)
        put("plan to visible", plan[0], publish[1])
        put("run", start, end)
        succeeded = [r for r in reports.get(run_id, []) if r.succeeded]
        if succeeded:
            slowest = max(succeeded, key=lambda r: r.seconds)
            phases["job in Spark"] = slowest.seconds
            phases.update(job_phases(slowest))
            if "jobs" in phases:
                phases["job task overhead"] = phases["jobs"] - slowest.seconds
        # when it planned: the plan's own time (a plan task that deferred in its gate started long before it
        # planned, and under load a phase's records could all go to a run whose task started before the phase)
        planned_at = record.plan.created_at.timestamp() if record is not None else plan[0]
        out.append(RunPhases(run_id, record.plan.records if record is not None else None, planned_at, phases,
                             sum(len(times) for times in tasks.values())))
        previous_end = end
    # overlapping runs may plan in another order than they started
    planned = sorted((r for r in out if r.plan_start is not None), key=lambda r: r.plan_start or 0.0)
    for before, after in zip(planned, planned[1:]):
        after.phases["between plans"] = (after.plan_start or 0.0) - (before.plan_start or 0.0)
    return out


def job_phases(report: Any) -> dict[str, float]:
    """A Spark job's seconds, from its report's marks (the driver's clock) and its splits' starts (the executors'
    clocks: the same machine here; on a cluster, what separates the two is as good as the clocks' agreement)."""
    out: dict[str, float] = {}
    splits = [s for s in report.splits if s.started_at is not None]
    if splits:
        out["  read+parse"] = max(s.seconds for s in splits)
    marks = report.marks
    if {"started", "writeStarted", "writeEnded", "ended"} <= marks.keys():
        out["  setup"] = marks["writeStarted"] - marks["started"]
        out["  footers"] = marks["ended"] - marks["writeEnded"]
        if splits:
            out["  before the read"] = min(s.started_at for s in splits) - marks["writeStarted"]
            out["  after the read"] = marks["writeEnded"] - max(s.started_at + s.seconds for s in splits)
    return out


def summarize(runs: list[RunPhases]) -> dict[str, Any]:
    """Medians per phase over the runs that read something (an idle run's phases would hide the busy ones')."""
    busy = [r for r in runs if r.records]
    medians = {name: statistics.median(vals) for name, _ in PHASES
               if (vals := [r.phases[name] for r in busy if name in r.phases])}
    records = [r.records for r in busy if r.records]
    # an event waits on average half the time between plans, then one plan to visible: the median freshness
    # these phases account for
    model = (medians["between plans"] / 2 + medians["plan to visible"]
             if "between plans" in medians and "plan to visible" in medians else None)
    return {"runs": len(runs), "runs_with_records": len(busy), "freshness_from_phases": model,
            "processes_per_run": statistics.median([r.processes for r in busy]) if busy else None,
            "records_per_run": {"median": statistics.median(records), "min": min(records), "max": max(records)}
            if records else None,
            "median_seconds": medians, "per_run": [asdict(r) for r in runs]}


def in_window(runs: list[RunPhases], start: float, end: float) -> list[RunPhases]:
    """The runs that planned in [start, end) (epoch s): one rate's phase."""
    return [r for r in runs if r.plan_start is not None and start <= r.plan_start < end]


def print_phases(summary: dict[str, Any]) -> None:
    rec = summary["records_per_run"]
    print(f"      where the seconds went: {summary['runs_with_records']} runs with records (of {summary['runs']}), "
          + (f"records per run median {rec['median']:,.0f} (min {rec['min']:,}, max {rec['max']:,})" if rec else
             "none read anything"))
    if summary["processes_per_run"] is not None:
        print(f"        task processes per run with records: {summary['processes_per_run']:g} (median)")
    if summary.get("airflow_cpu") is not None:
        print(f"        Airflow's CPU (the standalone tree, task processes included): {summary['airflow_cpu']:.1f} "
              f"CPU-s over {summary['runs']} runs, {summary['airflow_cpu'] / max(1, summary['runs']):.2f} CPU-s a run")
    medians = summary["median_seconds"]
    for name, what in PHASES:
        if name in medians:
            print(f"        {name:<18} {medians[name]:6.2f} s   {what}")
    if summary["freshness_from_phases"] is not None:
        print(f"        freshness these phases account for: {summary['freshness_from_phases']:.1f} s "
              "(half the time between plans + plan to visible)")
