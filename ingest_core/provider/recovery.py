"""Airflow's settings with which a run whose task or scheduler died is noticed in seconds (docs/deadlines.md, "A dead
task").

A task's supervisor process heartbeats to the api-server every `[workers] min_heartbeat_interval` (5 s). When the
LocalExecutor's worker running a task is killed, nothing reports the task's end: the scheduler fails the try only
once no heartbeat came for `[scheduler] task_instance_heartbeat_timeout` (300 s by default), checked every
`..._detection_interval` (10 s). With one run at a time (a `@continuous` datasource), nothing is published meanwhile.
30 s is six missed heartbeats: a live task on a loaded machine keeps its beat (a slow api-server answer delays one,
`[workers] execution_api_timeout`), and a dead one is failed and retried within about 35 s. A task failed by mistake
is retried too, and the exactly-once rules keep its first try from publishing twice.

A task the scheduler had queued when it died has no heartbeat to miss: the next scheduler resets it once the dead
one's job is `[scheduler] scheduler_health_check_threshold` (30 s) stale, but only looks every
`orphaned_tasks_check_interval` (300 s by default; a killed scheduler stalled a run 206 s in the soak): 10 s.

Every Airflow home or stack this project makes ships them: `ingest_core.dev.demo.airflow_env` (the demo, the tests'
and the benchmarks' schedulers) and docker-compose.yaml (tests/system/test_compose.py checks it)."""

from __future__ import annotations

TASK_HEARTBEAT_TIMEOUT_S = 30
RECOVERY_SETTINGS = {
    ("scheduler", "task_instance_heartbeat_timeout"): str(TASK_HEARTBEAT_TIMEOUT_S),
    ("scheduler", "task_instance_heartbeat_timeout_detection_interval"): "5",
    ("scheduler", "orphaned_tasks_check_interval"): "10",
}


def recovery_env() -> dict[str, str]:
    """`RECOVERY_SETTINGS` as Airflow's environment variables (AIRFLOW__SECTION__KEY)."""
    return {f"AIRFLOW__{section.upper()}__{key.upper()}": value for (section, key), value in RECOVERY_SETTINGS.items()}
