"""Two jobs of one datasource on one Spark Connect server, each with a deadline of its own, in a process of their
own: `python tests/connect_deadlines.py URL OUTPUT JOB_ARGS...` runs the later one (30 s) in a thread and the first one
(8 s) meanwhile, and prints one JSON line: each job's error, and whether the later one was still running when the
first had ended. tests/integration/test_spark_connect.py runs it beside its other tests: a Connect client switches
pyspark to Spark Connect for its whole process, and that process runs classic sessions meanwhile."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers import WATCHDOG_S  # noqa: E402

from ingest_core.spark.connect import run_job  # noqa: E402
from ingest_core.spark.job_args import argument_parser, job_input  # noqa: E402

DEADLINES_S = {"first": 8, "later": 30}


def main(url: str, output: str, job_args: list[str]) -> dict:
    """`output`: a folder URI, each job's output a folder of it; `job_args`: the rest of the jobs' arguments."""
    errors: dict[str, str] = {}

    def job(name: str) -> None:
        args = argument_parser().parse_args([*job_args, "--output", f"{output}/{name}"])
        try:
            run_job(url, job_input(args), timeout_s=DEADLINES_S[name], stall_timeout_s=args.stall_timeout)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors[name] = str(exc)
        else:
            errors[name] = "no error: the job succeeded"

    later = threading.Thread(target=job, args=("later",))
    later.start()
    job("first")
    outcome = {"first": errors["first"], "later running when the first ended": later.is_alive() and
               "later" not in errors}
    later.join(WATCHDOG_S)  # its deadline ends it; the watchdog only bounds a hang
    outcome["later"] = errors.get("later", "still running after the watchdog")
    return outcome


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3:])), flush=True)
