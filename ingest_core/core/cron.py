"""Cron schedules (`microbatch.schedule`), checked with croniter, the parser Airflow's cron timetables use
(airflow.timetables._cron), so a spec Airflow would refuse is refused when the spec is validated instead."""

from __future__ import annotations

from datetime import datetime

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from ingest_core.core.errors import shown

# Airflow's own presets (airflow.utils.dates.cron_presets), which its cron timetables expand first.
CRON_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}
# Airflow's ContinuousTimetable: the next run is created as soon as the previous one ends
CONTINUOUS = "@continuous"
_EXAMPLE = "use 5 fields (minute hour day-of-month month day-of-week) such as '*/10 * * * *', a preset (" \
           + ", ".join(CRON_PRESETS) + ") or an ISO-8601 period such as 'PT10M'"


def cron_problem(text: str) -> str | None:
    """Why `text` is not a cron schedule Airflow can run, or None."""
    expression = CRON_PRESETS.get(text.strip(), text.strip())
    if expression.startswith("@"):
        return f"{shown(text)} is not a cron schedule Airflow's data-interval timetables run; {_EXAMPLE}"
    try:
        cron = croniter(expression)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        return f"{shown(text)} is not a valid cron expression ({exc}); {_EXAMPLE}"
    if len(cron.expanded) != 5:  # Airflow does not describe or reliably evaluate seconds or year fields
        return f"{shown(text)} has {len(cron.expanded)} fields; {_EXAMPLE}"
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        return f"{shown(text)} never fires (no such date, e.g. 31 February); {_EXAMPLE}"
    return None
